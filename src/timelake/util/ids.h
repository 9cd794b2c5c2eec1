// Identifiers: random UUIDs for file names, table ids and commit transaction ids.
#pragma once

#include <string>

namespace timelake {

/// A random (version 4) UUID in its canonical 36-character lowercase form.
std::string NewUuid();

}  // namespace timelake
