#include "timelake/util/ids.h"

#include <openssl/rand.h>

#include <array>
#include <cstdio>
#include <random>

namespace timelake {
namespace {

// OpenSSL sets up its random generator on first use, under locks of its own. A fork() while
// another thread was doing that (the first file a lake writes) left the child waiting for those
// locks forever: it is set up when the library loads instead, before threads can race for it.
[[maybe_unused]] const bool kRandomReady = [] {
  unsigned char byte = 0;
  (void)RAND_bytes(&byte, 1);
  return true;
}();

}  // namespace

std::string NewUuid() {
  std::array<unsigned char, 16> b{};
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    std::random_device rd;
    for (auto& x : b) x = static_cast<unsigned char>(rd());
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[37];
  std::snprintf(out, sizeof(out),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return std::string(out, 36);
}

}  // namespace timelake
