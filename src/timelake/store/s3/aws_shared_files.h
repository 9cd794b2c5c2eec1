// The shared AWS files (~/.aws/credentials and ~/.aws/config): reading one profile from them.
//
// Both are INI files. In the credentials file a profile is a section named after it
// ("[default]", "[prod]"); in the config file it is "[profile prod]" (the default profile may
// be "[default]" or "[profile default]"), and other sections ("[sso-session x]",
// "[services x]") are not profiles. Locating the files (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE, the home folder) is the caller's job.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <arrow/result.h>

namespace timelake {

/// Section name → (key → value). Keys are lowercased (as botocore reads them), keys and values
/// trimmed. Blank lines and lines starting with '#' or ';' are skipped; indented lines (the
/// nested settings under "s3 =") and lines outside any section are ignored; for a key given
/// twice, or a section given twice, the later value wins.
using AwsIni = std::map<std::string, std::map<std::string, std::string>>;
AwsIni ParseAwsIni(std::string_view text);

/// One profile as the two files give it.
struct AwsProfile {
  std::string name;
  std::string credentials_path;  // the files read ("" when not located)
  std::string config_path;
  bool in_credentials_file = false;  // the file has a section for this profile
  bool in_config_file = false;
  std::map<std::string, std::string> credentials_file;  // the section's keys, if any
  std::map<std::string, std::string> config_file;

  bool found() const { return in_credentials_file || in_config_file; }
  /// `key` from the config file, "" when absent.
  std::string Setting(const std::string& key) const;
};

/// Reads profile `name` from the files at `credentials_path` and `config_path` (either may be
/// ""). A file that does not exist reads as empty; one that exists but cannot be read is an
/// IOError naming it. Never an error for a profile that is absent: see AwsProfile::found().
arrow::Result<AwsProfile> LoadAwsProfile(const std::string& name,
                                         const std::string& credentials_path,
                                         const std::string& config_path);

}  // namespace timelake
