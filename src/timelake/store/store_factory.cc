#include "timelake/store/store_factory.h"

#include <filesystem>
#include <set>

#include "timelake/store/azure/azure_store.h"
#include "timelake/store/gcs/gcs_store.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"
#include "timelake/store/s3/s3_store.h"

namespace timelake {
namespace {

// storage_options keys users know from delta-rs / object_store, per store kind.
const std::set<std::string>& KnownStorageOptions() {
  static const std::set<std::string> keys = {
      "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_token",
      "aws_region", "aws_default_region", "aws_endpoint", "aws_endpoint_url",
      "aws_virtual_hosted_style_request", "aws_allow_http", "aws_unsigned_payload",
      "aws_skip_signature", "aws_conditional_put", "aws_profile", "aws_web_identity_token_file",
      "aws_role_arn", "aws_role_session_name", "aws_metadata_endpoint",
      "azure_storage_account_name", "azure_storage_account_key", "access_key",
      "azure_storage_sas_token", "azure_storage_sas_key", "azure_storage_token",
      "azure_storage_client_id", "azure_storage_client_secret", "azure_storage_tenant_id",
      "azure_storage_use_emulator", "azure_storage_endpoint", "azure_federated_token_file",
      "azure_use_azure_cli", "google_service_account", "google_service_account_path",
      "google_service_account_key", "service_account", "service_account_path",
      "service_account_key", "google_application_credentials", "google_base_url",
      "google_bearer_token", "google_skip_signature", "allow_http", "allow_invalid_certificates",
      "timeout", "connect_timeout", "pool_idle_timeout", "proxy_url", "user_agent",
      "max_retries", "retry_timeout", "aws_s3_allow_unsafe_rename", "aws_s3_locking_provider",
      "delta_dynamo_table_name"};
  static const std::set<std::string> all = [] {
    std::set<std::string> out = keys;
    out.insert(AzureStorageOptionKeys().begin(), AzureStorageOptionKeys().end());
    return out;
  }();
  return all;
}

bool IsCloudScheme(const std::string& scheme) {
  return scheme == "s3" || scheme == "s3a" || scheme == "gs" || scheme == "az" ||
         scheme == "azure" || scheme == "abfs" || scheme == "abfss";
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenLocal(const std::string& path,
                                                      const StorageOptions& options) {
  if (!options.empty()) {
    return arrow::Status::Invalid("storage option '", options.begin()->first,
                                  "' does not apply to a local lake (", path, ")");
  }
  // A lake keeps its tables at <namespace>/<table>/: only create_table makes those folders.
  ARROW_ASSIGN_OR_RAISE(auto store, LocalStore::Make(path, /*fixed_depth=*/2));
  return store;
}

// Invalid, naming the key, if `options` holds a key that no store knows.
arrow::Status CheckStorageOptionKeys(const StorageOptions& options) {
  for (const auto& [key, value] : options) {
    if (!KnownStorageOptions().count(key)) {
      return arrow::Status::Invalid("unknown storage option '", key,
                                    "'; use the key names of delta-rs/object_store, such as "
                                    "aws_region, aws_endpoint or azure_storage_account_name");
    }
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Result<std::shared_ptr<ObjectStore>> OpenStore(const std::string& location,
                                                      const StorageOptions& options) {
  ARROW_RETURN_NOT_OK(CheckStorageOptionKeys(options));
  if (location.empty()) return arrow::Status::Invalid("lake location must not be empty");
  if (location.find('\0') != std::string::npos) {
    // The file system would silently cut the path at the NUL and open another folder.
    return arrow::Status::Invalid("lake location must not contain a NUL character");
  }
  const auto scheme_end = location.find("://");
  if (scheme_end == std::string::npos) {
    return OpenLocal(std::filesystem::absolute(location).lexically_normal().string(), options);
  }
  const std::string scheme = location.substr(0, scheme_end);
  const std::string rest = location.substr(scheme_end + 3);
  if (scheme == "file") {
    if (rest.empty() || rest[0] != '/') {
      return arrow::Status::Invalid("file URL '", location,
                                    "' must hold an absolute path, such as file:///data/lake");
    }
    return OpenLocal(std::filesystem::path(rest).lexically_normal().string(), options);
  }
  if (scheme == "memory") {
    if (!options.empty()) {
      return arrow::Status::Invalid("storage option '", options.begin()->first,
                                    "' does not apply to a memory:// lake");
    }
    return std::make_shared<MemoryStore>(rest);
  }
  if (scheme == "s3" || scheme == "s3a") return OpenS3Store(location, options);
  if (scheme == "gs") return OpenGcsStore(location, options);
  if (scheme == "az" || scheme == "azure" || scheme == "abfs" || scheme == "abfss") {
    return OpenAzureStore(location, options);
  }
  if (IsCloudScheme(scheme)) {
    return arrow::Status::NotImplemented(
        "lake '", location, "': the ", scheme,
        ":// object store is not available in this build yet; use a local path or file:// URL");
  }
  return arrow::Status::Invalid("lake location '", location, "' has an unknown scheme '", scheme,
                                "://'; use a local path, file://, s3://, gs:// or az://");
}

}  // namespace timelake
