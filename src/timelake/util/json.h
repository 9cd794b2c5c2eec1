// JsonWriter: RapidJSON's writer with std::string keys (Debian's RapidJSON 1.1 lacks them).
#pragma once

#include <cstring>
#include <string>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace timelake {

class JsonWriter : public rapidjson::Writer<rapidjson::StringBuffer> {
 public:
  using Base = rapidjson::Writer<rapidjson::StringBuffer>;
  using Base::Base;
  using Base::Key;
  bool Key(const std::string& key) {
    return Base::Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  }
  bool Key(const char* key) {
    return Base::Key(key, static_cast<rapidjson::SizeType>(std::strlen(key)));
  }
};

}  // namespace timelake
