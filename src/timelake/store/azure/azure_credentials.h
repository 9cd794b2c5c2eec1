// Azure Storage credentials for the Azure store: SharedKey signing, and where credentials come
// from.
//
// MakeAzureCredentialChain picks one source from the configuration, in object_store's (delta-rs's)
// order, and returns a provider for it:
//   1. azure_skip_signature=true: requests go unsigned (public containers, emulators that allow it);
//   2. azure_storage_token (a bearer token given as it is);
//   3. azure_storage_account_key: SharedKey signing (the emulator's well-known key when
//      azure_storage_use_emulator is set and no key is given);
//   4. azure_client_id + azure_tenant_id + azure_federated_token_file: workload identity (the
//      file's token exchanged at Microsoft Entra ID for an access token; re-read at each refresh);
//   5. azure_client_id + azure_client_secret + azure_tenant_id: a service principal's secret;
//   6. azure_storage_sas_token: a shared access signature appended to every URL;
//   7. otherwise managed identity (IMDS, or azure_msi_endpoint / IDENTITY_ENDPOINT).
// A connection string (azure_storage_connection_string or AZURE_STORAGE_CONNECTION_STRING) fills
// in the account, key, SAS and endpoint it holds. A configured source that fails is an error; the
// chain never falls through to the next one. azure_use_azure_cli is refused (timelake does not run
// the az program): `az account get-access-token` can feed azure_storage_token.
//
// Secrets (keys, SAS tokens, client secrets, access tokens) never appear in a status message or
// in Source().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <arrow/result.h>

#include "timelake/http/http_client.h"  // HttpFetch, EnvLookup, MillisClock

namespace timelake {

struct AzureCredential {
  enum class Kind { kAnonymous, kSharedKey, kSas, kBearer };
  Kind kind = Kind::kAnonymous;
  std::string account_key;  // kSharedKey: the key's bytes (base64-decoded)
  std::string sas_query;    // kSas: "sv=…&sig=…" without a leading '?'
  std::string bearer;       // kBearer: the access token
  int64_t expires_ms = 0;   // 0 = never
};

class AzureCredentialProvider {
 public:
  virtual ~AzureCredentialProvider() = default;
  /// Current credentials; tokens are refreshed when fewer than 5 minutes remain (under a lock;
  /// a failed refresh keeps a token that is still valid).
  virtual arrow::Result<AzureCredential> Get() = 0;
  /// Drops a token the service refused, so that the next Get() fetches another; false (and
  /// nothing happens) for credentials that cannot be refreshed.
  virtual bool Invalidate() { return false; }
  /// Where they come from, for messages. Never a secret.
  virtual std::string Source() const = 0;
};

/// The resolved configuration of an Azure lake: the account, where its blob service is, and the
/// credential provider.
struct AzureSettings {
  std::string account;
  /// scheme://host[:port][/path] of the blob service, no trailing '/': the container follows it.
  std::string endpoint;
  bool emulator = false;
  std::shared_ptr<AzureCredentialProvider> credentials;
};

struct AzureCredentialInputs {
  /// storage_options with delta-rs key names (azure_storage_account_name, azure_storage_account_key,
  /// azure_storage_sas_token, azure_storage_token, azure_client_id, azure_client_secret,
  /// azure_tenant_id, azure_authority_host, azure_federated_token_file, azure_msi_endpoint,
  /// azure_object_id, azure_msi_resource_id, azure_storage_use_emulator, azure_storage_endpoint,
  /// azure_skip_signature, azure_storage_connection_string, …), aliases already folded in.
  std::map<std::string, std::string> options;
  /// The account named by the lake URL (abfss://container@account.dfs.core.windows.net), "" if none.
  std::string url_account;
  EnvLookup env;        // null = the process environment
  HttpFetch fetch;      // how to reach Entra ID and IMDS; null = no network
  MillisClock now_ms;   // null = the system clock
};

/// The settings of the first configured source (see the top of this file). Invalid, naming the
/// key, for missing or malformed values (no account, a key that is not base64, half a service
/// principal, an unreadable connection string).
arrow::Result<AzureSettings> ResolveAzureSettings(const AzureCredentialInputs& inputs);

/// The well-known key of Azurite's and the storage emulator's account devstoreaccount1.
extern const char* const kAzureEmulatorAccount;
extern const char* const kAzureEmulatorKey;

// ---- SharedKey ---------------------------------------------------------------------------------

struct AzureSignedRequest {
  std::string method;
  /// The URL path as sent, percent-encoded ("/container/blob" or, path-style,
  /// "/devstoreaccount1/container/blob").
  std::string path;
  std::map<std::string, std::string> query;    // decoded names and values
  std::map<std::string, std::string> headers;  // names in any case, values as sent
  int64_t content_length = 0;
};

/// The string to sign for the Blob service's SharedKey scheme (version 2009-09-19 and later):
/// the verb, eleven standard headers, the canonicalized x-ms-* headers and the canonicalized
/// resource, as "Authorize with Shared Key" documents them.
std::string AzureStringToSign(const AzureSignedRequest& request, const std::string& account);

/// "SharedKey <account>:<base64 HMAC-SHA256 of the string to sign>".
std::string AzureSharedKeyAuthorization(const AzureSignedRequest& request,
                                        const std::string& account, const std::string& key);

}  // namespace timelake
