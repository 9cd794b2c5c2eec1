# Imports Arrow C++ from the pyarrow wheel as CMake targets.
#
# The wheel ships headers and versioned shared libraries but no ArrowConfig.cmake, so a small
# Python probe (arrow_probe.py) prints their locations and we declare IMPORTED targets:
#   PyArrow::arrow PyArrow::arrow_compute PyArrow::parquet
# PYARROW_LIBRARY_DIR is the wheel's package folder (used for RPATHs).

set(_pyarrow_libs arrow arrow_compute parquet)
execute_process(
  COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/arrow_probe.py" ${_pyarrow_libs}
  OUTPUT_VARIABLE _probe
  RESULT_VARIABLE _probe_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _probe_rc EQUAL 0)
  message(FATAL_ERROR "Could not locate Arrow C++ in pyarrow (is pyarrow installed for ${Python_EXECUTABLE}?)")
endif()
string(REPLACE "\n" ";" _probe "${_probe}")
list(POP_FRONT _probe PYARROW_INCLUDE_DIR PYARROW_LIBRARY_DIR)
foreach(_name IN LISTS _pyarrow_libs)
  list(POP_FRONT _probe _path)
  add_library(PyArrow::${_name} SHARED IMPORTED)
  set_target_properties(PyArrow::${_name} PROPERTIES
    IMPORTED_LOCATION "${_path}"
    INTERFACE_INCLUDE_DIRECTORIES "${PYARROW_INCLUDE_DIR}")
endforeach()
message(STATUS "Arrow C++ from pyarrow: ${PYARROW_LIBRARY_DIR}")
