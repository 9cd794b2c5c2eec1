"""Prints where the pyarrow wheel keeps Arrow C++ so CMake can import it (see cmake/PyArrow.cmake)."""
import os
import sys

import pyarrow

libdir = pyarrow.get_library_dirs()[0]
print(pyarrow.get_include())
print(libdir)
for name in sys.argv[1:]:
    candidates = sorted(f for f in os.listdir(libdir) if f.startswith(f"lib{name}.so."))
    if not candidates:
        sys.exit(f"pyarrow at {libdir} ships no lib{name}.so.*")
    # The shortest name is the SONAME (libarrow.so.2600), which is what the loader looks for.
    print(os.path.join(libdir, min(candidates, key=len)))
