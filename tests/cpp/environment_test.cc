// Process-wide set-up for the unit tests (gtest_main provides main()).
//
// Arrow's compute kernels (cast, sort, take, min/max, …) register themselves only when
// arrow::compute::Initialize() runs; Lake::OverStore does it for applications, but the tests reach
// the ingest code directly, so the environment does it once before any test.
#include <arrow/compute/initialize.h>
#include <gtest/gtest.h>

namespace timelake {
namespace {

class ArrowComputeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_TRUE(arrow::compute::Initialize().ok()); }
};

[[maybe_unused]] ::testing::Environment* const kArrowCompute =
    ::testing::AddGlobalTestEnvironment(new ArrowComputeEnvironment);

}  // namespace
}  // namespace timelake
