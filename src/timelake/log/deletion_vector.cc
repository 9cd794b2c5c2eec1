#include "timelake/log/deletion_vector.h"

#include <algorithm>
#include <cstring>

#include <arrow/buffer.h>
#include <arrow/util/crc32.h>

#include "timelake/log/data_path.h"
#include "timelake/store/object_store.h"

namespace timelake {
namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
constexpr uint32_t kRoaringArrayMagic = 1681511377;
constexpr uint32_t kCookieNoRuns = 12346;
constexpr uint32_t kCookieRuns = 12347;

// Little-endian reads over a byte range, failing on a short input.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  arrow::Result<T> Read() {
    if (bytes_.size() - at_ < sizeof(T)) {
      return arrow::Status::IOError("deletion vector is truncated (", bytes_.size(), " bytes)");
    }
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      value |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(bytes_[at_ + i])) << (8 * i));
    }
    at_ += sizeof(T);
    return value;
  }
  arrow::Status Skip(size_t n) {
    if (bytes_.size() - at_ < n) return arrow::Status::IOError("deletion vector is truncated");
    at_ += n;
    return arrow::Status::OK();
  }
  size_t at() const { return at_; }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

// One portable 32-bit Roaring bitmap, its values offset by `high` << 32. `limit`: the most values
// `out` may hold (the cardinality the log records), checked before anything is expanded.
arrow::Status ParseRoaring32(Cursor* in, uint64_t high, size_t limit, std::vector<uint64_t>* out) {
  ARROW_ASSIGN_OR_RAISE(uint32_t cookie, in->Read<uint32_t>());
  uint32_t size = 0;
  std::vector<uint8_t> run_flags;
  const bool runs = (cookie & 0xFFFF) == kCookieRuns;
  if (runs) {
    size = (cookie >> 16) + 1;
    run_flags.resize((size + 7) / 8);
    for (auto& b : run_flags) {
      ARROW_ASSIGN_OR_RAISE(b, in->Read<uint8_t>());
    }
  } else if (cookie == kCookieNoRuns) {
    ARROW_ASSIGN_OR_RAISE(size, in->Read<uint32_t>());
  } else {
    return arrow::Status::IOError("deletion vector: not a Roaring bitmap (cookie ", cookie, ")");
  }
  if (size > 65536) return arrow::Status::IOError("deletion vector: ", size, " containers");
  std::vector<std::pair<uint16_t, uint32_t>> headers(size);  // key, cardinality
  for (auto& [key, card] : headers) {
    ARROW_ASSIGN_OR_RAISE(key, in->Read<uint16_t>());
    ARROW_ASSIGN_OR_RAISE(uint16_t card_minus_one, in->Read<uint16_t>());
    card = static_cast<uint32_t>(card_minus_one) + 1;
  }
  if (!runs || size >= 4) ARROW_RETURN_NOT_OK(in->Skip(4ull * size));  // container offsets
  uint64_t total = out->size();
  for (const auto& header : headers) total += header.second;
  if (total > limit) {
    return arrow::Status::IOError("deletion vector holds more rows than the ", limit, " the log records");
  }
  for (uint32_t i = 0; i < size; ++i) {
    const uint64_t base = high << 32 | static_cast<uint64_t>(headers[i].first) << 16;
    const uint32_t card = headers[i].second;
    if (runs && (run_flags[i / 8] >> (i % 8) & 1)) {
      ARROW_ASSIGN_OR_RAISE(uint16_t n, in->Read<uint16_t>());
      uint64_t in_runs = 0;
      for (uint16_t r = 0; r < n; ++r) {
        ARROW_ASSIGN_OR_RAISE(uint16_t start, in->Read<uint16_t>());
        ARROW_ASSIGN_OR_RAISE(uint16_t length_minus_one, in->Read<uint16_t>());
        const uint32_t end = static_cast<uint32_t>(start) + length_minus_one;
        in_runs += static_cast<uint64_t>(length_minus_one) + 1;
        if (end > 0xFFFF || in_runs > card) {
          return arrow::Status::IOError("deletion vector: a run container does not match its header");
        }
        for (uint32_t v = start; v <= end; ++v) out->push_back(base | v);
      }
    } else if (card > 4096) {
      for (uint32_t w = 0; w < 1024; ++w) {
        ARROW_ASSIGN_OR_RAISE(uint64_t word, in->Read<uint64_t>());
        while (word) {
          const int bit = __builtin_ctzll(word);
          out->push_back(base | (w * 64 + bit));
          word &= word - 1;
        }
      }
    } else {
      for (uint32_t k = 0; k < card; ++k) {
        ARROW_ASSIGN_OR_RAISE(uint16_t v, in->Read<uint16_t>());
        out->push_back(base | v);
      }
    }
  }
  return arrow::Status::OK();
}

std::string UuidText(const std::string& bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    const auto b = static_cast<unsigned char>(bytes[i]);
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

}  // namespace

arrow::Result<std::string> Z85Decode(std::string_view text) {
  if (text.size() % 5 != 0) {
    return arrow::Status::IOError("Z85 text of ", text.size(), " characters (not a multiple of 5)");
  }
  std::string out;
  out.reserve(text.size() / 5 * 4);
  for (size_t i = 0; i < text.size(); i += 5) {
    uint64_t value = 0;
    for (size_t k = 0; k < 5; ++k) {
      const auto digit = kZ85.find(text[i + k]);
      if (digit == std::string_view::npos) return arrow::Status::IOError("not a Z85 character: '", text[i + k], "'");
      value = value * 85 + digit;
    }
    if (value > 0xFFFFFFFFull) return arrow::Status::IOError("Z85 group out of range");
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((value >> shift) & 0xFF);
  }
  return out;
}

arrow::Result<std::vector<uint64_t>> ParseRoaringBitmapArray(std::string_view bytes, size_t limit) {
  Cursor in(bytes);
  ARROW_ASSIGN_OR_RAISE(uint32_t magic, in.Read<uint32_t>());
  if (magic != kRoaringArrayMagic) {
    return arrow::Status::IOError("deletion vector: unknown format (magic number ", magic, ")");
  }
  ARROW_ASSIGN_OR_RAISE(uint64_t count, in.Read<uint64_t>());
  if (count > bytes.size()) return arrow::Status::IOError("deletion vector: ", count, " bitmaps");
  std::vector<uint64_t> rows;
  for (uint64_t i = 0; i < count; ++i) {
    ARROW_ASSIGN_OR_RAISE(uint32_t high, in.Read<uint32_t>());
    ARROW_RETURN_NOT_OK(ParseRoaring32(&in, high, limit, &rows));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

arrow::Result<std::string> DeletionVectorPath(const std::string& table_path, const DeletionVector& dv) {
  if (dv.storage_type == "p") return DataFileStorePath(table_path, dv.path_or_inline);
  if (dv.storage_type != "u") {
    return arrow::Status::Invalid("deletion vector of storage type '", dv.storage_type, "' has no file");
  }
  const std::string& encoded = dv.path_or_inline;
  if (encoded.size() < 20) return arrow::Status::IOError("deletion vector path '", encoded, "' is too short");
  const std::string prefix = encoded.substr(0, encoded.size() - 20);
  ARROW_ASSIGN_OR_RAISE(std::string uuid, Z85Decode(std::string_view(encoded).substr(encoded.size() - 20)));
  const std::string name = "deletion_vector_" + UuidText(uuid) + ".bin";
  // The prefix is a random folder name of the writer's, from the log: confined like any path.
  ARROW_ASSIGN_OR_RAISE(std::string relative,
                        ConfineToTable((prefix.empty() ? "" : prefix + "/") + name));
  return JoinPath(table_path, relative);
}

arrow::Result<std::vector<uint64_t>> ReadDeletionVector(ObjectStore* store, const std::string& table_path,
                                                        const DeletionVector& dv) {
  if (dv.size_in_bytes < 0 || dv.size_in_bytes > (1LL << 31) || dv.cardinality < 0 ||
      (dv.offset && *dv.offset < 0)) {
    return arrow::Status::IOError("deletion vector descriptor out of range (size ", dv.size_in_bytes,
                                  ", cardinality ", dv.cardinality, ")");
  }
  const auto limit = static_cast<size_t>(dv.cardinality);
  std::vector<uint64_t> rows;
  if (dv.storage_type == "i") {
    ARROW_ASSIGN_OR_RAISE(std::string bytes, Z85Decode(dv.path_or_inline));
    ARROW_ASSIGN_OR_RAISE(rows, ParseRoaringBitmapArray(std::string_view(bytes).substr(
                                    0, std::min<size_t>(bytes.size(), static_cast<size_t>(dv.size_in_bytes))), limit));
  } else {
    ARROW_ASSIGN_OR_RAISE(std::string path, DeletionVectorPath(table_path, dv));
    const int64_t offset = dv.offset.value_or(1);
    ARROW_ASSIGN_OR_RAISE(auto data, store->GetRange(path, offset, dv.size_in_bytes + 8));
    if (data->size() != dv.size_in_bytes + 8 || data->size() < 8) {
      return arrow::Status::IOError("deletion vector in ", path, " is truncated");
    }
    const auto* p = data->data();
    const uint32_t length = static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
                            static_cast<uint32_t>(p[2]) << 8 | p[3];
    if (length != static_cast<uint64_t>(dv.size_in_bytes)) {
      return arrow::Status::IOError("deletion vector in ", path, " at ", offset, " holds ", length,
                                    " bytes, the log says ", dv.size_in_bytes);
    }
    const uint8_t* crc_at = p + 4 + length;
    const uint32_t expected = static_cast<uint32_t>(crc_at[0]) << 24 | static_cast<uint32_t>(crc_at[1]) << 16 |
                              static_cast<uint32_t>(crc_at[2]) << 8 | crc_at[3];
    if (arrow::internal::crc32(0, p + 4, length) != expected) {
      return arrow::Status::IOError("deletion vector in ", path, " at ", offset, " fails its CRC check");
    }
    ARROW_ASSIGN_OR_RAISE(rows, ParseRoaringBitmapArray(std::string_view(reinterpret_cast<const char*>(p + 4), length), limit));
  }
  if (static_cast<int64_t>(rows.size()) != dv.cardinality) {
    return arrow::Status::IOError("deletion vector deletes ", rows.size(), " rows, the log says ", dv.cardinality);
  }
  return rows;
}

}  // namespace timelake
