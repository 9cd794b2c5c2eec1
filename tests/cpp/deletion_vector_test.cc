// Deletion vectors: Z85, the portable Roaring formats, and the on-disk framing (length, CRC).
#include "timelake/log/deletion_vector.h"

#include <arrow/buffer.h>
#include <arrow/util/crc32.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

template <typename T>
void Put(std::string* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

// A RoaringBitmapArray of one 32-bit bitmap per high key, built by hand.
std::string ArrayOf(const std::vector<std::pair<uint32_t, std::string>>& bitmaps) {
  std::string out;
  Put<uint32_t>(&out, 1681511377);
  Put<uint64_t>(&out, bitmaps.size());
  for (const auto& [high, bitmap] : bitmaps) {
    Put<uint32_t>(&out, high);
    out += bitmap;
  }
  return out;
}

TEST(Z85Test, DecodesTheSpecExample) {
  ASSERT_OK_AND_ASSIGN(auto bytes, Z85Decode("HelloWorld"));
  EXPECT_EQ(bytes, std::string("\x86\x4F\xD2\x6F\xB5\x59\xF7\x5B", 8));
  EXPECT_FALSE(Z85Decode("Hell").ok());
  EXPECT_FALSE(Z85Decode("Hell\"").ok());
}

TEST(RoaringTest, ArrayBitmapAndRunContainersDecode) {
  // No runs: an array container {1, 5} under key 0 and a bitmap container (5024 values: every
  // even number below 10048) under key 2.
  std::string plain;
  Put<uint32_t>(&plain, 12346);
  Put<uint32_t>(&plain, 2);
  Put<uint16_t>(&plain, 0);
  Put<uint16_t>(&plain, 1);  // cardinality 2
  Put<uint16_t>(&plain, 2);
  Put<uint16_t>(&plain, 5023);  // cardinality 5024: the bits set below
  Put<uint32_t>(&plain, 0);  // offsets (not used by the reader)
  Put<uint32_t>(&plain, 0);
  Put<uint16_t>(&plain, 1);
  Put<uint16_t>(&plain, 5);
  for (int w = 0; w < 1024; ++w) Put<uint64_t>(&plain, w < 157 ? 0x5555555555555555ULL : 0);
  // With runs: one run container [10, 12] under key 1 (fewer than 4 containers: no offsets).
  std::string runs;
  Put<uint32_t>(&runs, 12347);  // size 1: (1 - 1) << 16
  runs.push_back(1);            // container 0 is a run container
  Put<uint16_t>(&runs, 1);
  Put<uint16_t>(&runs, 2);  // cardinality 3
  Put<uint16_t>(&runs, 1);  // one run
  Put<uint16_t>(&runs, 10);
  Put<uint16_t>(&runs, 2);  // length - 1
  ASSERT_OK_AND_ASSIGN(auto rows, ParseRoaringBitmapArray(ArrayOf({{0, plain}, {7, runs}})));
  std::vector<uint64_t> expected = {1, 5};
  for (uint64_t v = 0; v < 157 * 64; v += 2) expected.push_back((2ULL << 16) | v);
  for (uint64_t v : {10, 11, 12}) expected.push_back((7ULL << 32) | (1ULL << 16) | v);
  EXPECT_EQ(rows, expected);
}

TEST(RoaringTest, DamageIsAnErrorNotWrongRows) {
  std::string bitmap;
  Put<uint32_t>(&bitmap, 12346);
  Put<uint32_t>(&bitmap, 1);
  Put<uint16_t>(&bitmap, 0);
  Put<uint16_t>(&bitmap, 2);  // cardinality 3, but only two values follow
  Put<uint32_t>(&bitmap, 0);
  Put<uint16_t>(&bitmap, 1);
  Put<uint16_t>(&bitmap, 2);
  EXPECT_FALSE(ParseRoaringBitmapArray(ArrayOf({{0, bitmap}})).ok());
  std::string wrong_magic = ArrayOf({});
  wrong_magic[0] ^= 1;
  EXPECT_FALSE(ParseRoaringBitmapArray(wrong_magic).ok());
}

TEST(RoaringTest, HeadersPromisingMoreThanTheLimitOrRunsPastTheirContainerAreErrors) {
  std::string runs;
  Put<uint32_t>(&runs, 12347);
  runs.push_back(1);
  Put<uint16_t>(&runs, 0);
  Put<uint16_t>(&runs, 2);  // cardinality 3
  Put<uint16_t>(&runs, 1);
  Put<uint16_t>(&runs, 65534);
  Put<uint16_t>(&runs, 2);  // 65534..65536: past the container
  EXPECT_FALSE(ParseRoaringBitmapArray(ArrayOf({{0, runs}})).ok());
  std::string many;
  Put<uint32_t>(&many, 12347);
  many.push_back(1);
  Put<uint16_t>(&many, 0);
  Put<uint16_t>(&many, 65535);  // 65,536 values claimed
  Put<uint16_t>(&many, 1);
  Put<uint16_t>(&many, 0);
  Put<uint16_t>(&many, 65535);
  ASSERT_OK_AND_ASSIGN(auto all, ParseRoaringBitmapArray(ArrayOf({{0, many}})));
  EXPECT_EQ(all.size(), 65536u);
  EXPECT_FALSE(ParseRoaringBitmapArray(ArrayOf({{0, many}}), /*limit=*/10).ok());
}

TEST(DeletionVectorTest, ADescriptorOutOfRangeIsAnErrorWithoutReading) {
  auto store = std::make_shared<MemoryStore>();
  for (int64_t size : {-8, -5, -1}) {
    DeletionVector dv{"u", "ab00000000000000000000", 1, size, 2};
    EXPECT_FALSE(ReadDeletionVector(store.get(), "default/t", dv).ok()) << size;
  }
  DeletionVector negative{"u", "ab00000000000000000000", -3, 10, 2};
  EXPECT_FALSE(ReadDeletionVector(store.get(), "default/t", negative).ok());
}

TEST(DeletionVectorTest, AFileDeletionVectorIsFramedAndChecked) {
  auto store = std::make_shared<MemoryStore>();
  std::string bitmap;
  Put<uint32_t>(&bitmap, 12346);
  Put<uint32_t>(&bitmap, 1);
  Put<uint16_t>(&bitmap, 0);
  Put<uint16_t>(&bitmap, 1);
  Put<uint32_t>(&bitmap, 0);
  Put<uint16_t>(&bitmap, 3);
  Put<uint16_t>(&bitmap, 4);
  const std::string body = ArrayOf({{0, bitmap}});
  std::string file(1, '\x01');  // format version
  const uint32_t length = static_cast<uint32_t>(body.size());
  for (int shift = 24; shift >= 0; shift -= 8) file.push_back(static_cast<char>((length >> shift) & 0xFF));
  file += body;
  const uint32_t crc = arrow::internal::crc32(0, body.data(), body.size());
  for (int shift = 24; shift >= 0; shift -= 8) file.push_back(static_cast<char>((crc >> shift) & 0xFF));
  // "u": a prefix, then the UUID 00000000-0000-0000-0000-000000000000 in Z85 (twenty zeros).
  DeletionVector dv{"u", "ab00000000000000000000", 1, static_cast<int64_t>(body.size()), 2};
  ASSERT_OK_AND_ASSIGN(auto path, DeletionVectorPath("default/t", dv));
  EXPECT_EQ(path, "default/t/ab/deletion_vector_00000000-0000-0000-0000-000000000000.bin");
  ASSERT_OK(store->Put(path, arrow::Buffer::FromString(file)));
  ASSERT_OK_AND_ASSIGN(auto rows, ReadDeletionVector(store.get(), "default/t", dv));
  EXPECT_EQ(rows, (std::vector<uint64_t>{3, 4}));
  // The log's cardinality must agree, and a flipped byte fails the CRC.
  dv.cardinality = 3;
  EXPECT_FALSE(ReadDeletionVector(store.get(), "default/t", dv).ok());
  dv.cardinality = 2;
  file[10] ^= 0x40;
  ASSERT_OK(store->Put(path, arrow::Buffer::FromString(file)));
  auto damaged = ReadDeletionVector(store.get(), "default/t", dv);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("CRC"), std::string::npos) << damaged.status().message();
}

}  // namespace
}  // namespace timelake::testing
