#include "timelake/store/s3/aws_shared_files.h"
#include "timelake/util/text.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <arrow/status.h>

namespace timelake {
namespace {



// The file's text, "" if it does not exist.
arrow::Result<std::string> ReadIfPresent(const std::string& path) {
  if (path.empty()) return std::string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (std::filesystem::is_directory(path, ec) || !in.is_open()) {
    return arrow::Status::IOError("cannot read the AWS shared file ", path,
                                  ": check that it is a readable file, or point ",
                                  "AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE elsewhere");
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return arrow::Status::IOError("error while reading the AWS shared file ", path);
  return text;
}

// The profile a config-file section describes, "" if it is not a profile section.
std::string ConfigSectionProfile(const std::string& section) {
  if (section == "default") return section;
  constexpr std::string_view kPrefix = "profile";
  if (section.size() > kPrefix.size() && section.compare(0, kPrefix.size(), kPrefix) == 0 &&
      std::isspace(static_cast<unsigned char>(section[kPrefix.size()]))) {
    return std::string(TrimView(std::string_view(section).substr(kPrefix.size())));
  }
  return "";
}

}  // namespace

AwsIni ParseAwsIni(std::string_view text) {
  AwsIni ini;
  std::map<std::string, std::string>* section = nullptr;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    const std::string_view line = TrimView(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const size_t close = line.find(']');
      section = close == std::string_view::npos
                    ? nullptr
                    : &ini[std::string(TrimView(line.substr(1, close - 1)))];
      continue;
    }
    // An indented line belongs to a nested block ("s3 =\n  addressing_style = path").
    if (section == nullptr || std::isspace(static_cast<unsigned char>(raw.front()))) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    (*section)[Lower(TrimView(line.substr(0, eq)))] = std::string(TrimView(line.substr(eq + 1)));
  }
  return ini;
}

std::string AwsProfile::Setting(const std::string& key) const {
  const auto it = config_file.find(key);
  return it == config_file.end() ? std::string() : it->second;
}

arrow::Result<AwsProfile> LoadAwsProfile(const std::string& name,
                                         const std::string& credentials_path,
                                         const std::string& config_path) {
  AwsProfile profile;
  profile.name = name;
  profile.credentials_path = credentials_path;
  profile.config_path = config_path;

  ARROW_ASSIGN_OR_RAISE(const std::string credentials_text, ReadIfPresent(credentials_path));
  const AwsIni credentials = ParseAwsIni(credentials_text);
  if (const auto it = credentials.find(name); it != credentials.end()) {
    profile.in_credentials_file = true;
    profile.credentials_file = it->second;
  }

  ARROW_ASSIGN_OR_RAISE(const std::string config_text, ReadIfPresent(config_path));
  // "[default]" and "[profile default]" both describe the default profile. They merge in the
  // map's order ("default" before "profile default"): the explicit form wins a conflict.
  for (const auto& [section, keys] : ParseAwsIni(config_text)) {
    if (ConfigSectionProfile(section) != name) continue;
    profile.in_config_file = true;
    for (const auto& [key, value] : keys) profile.config_file[key] = value;
  }
  return profile;
}

}  // namespace timelake
