// Credentials fetched over HTTP: STS web identity, the container endpoint, EC2 instance
// metadata (IMDSv2).
//
// Each function makes one attempt at each request it needs through `fetch` (IMDS needs three)
// and parses the reply; caching and refreshing are the provider's job (aws_credentials.h), and
// timeouts and retries the fetch's. Failures are IOErrors naming the endpoint and what it
// answered. No secret appears in them, not even one a server echoes back: tokens and keys are
// cut out of any text a reply or a transport error contributes.
#pragma once

#include <string>

#include <arrow/result.h>

#include "timelake/store/s3/aws_credentials.h"

namespace timelake {

struct WebIdentitySettings {
  std::string token_file;    // read at every call: the platform rotates the token
  std::string role_arn;
  std::string session_name;  // RoleSessionName
  std::string sts_endpoint;  // "https://sts.eu-west-1.amazonaws.com", no trailing slash
};

/// STS AssumeRoleWithWebIdentity: POSTs the form (Action, Version, RoleArn, RoleSessionName,
/// WebIdentityToken) to `sts_endpoint` + "/" and reads the XML reply. The request is unsigned
/// (the token is the proof), and the token travels in the body, never in the URL.
arrow::Result<AwsCredentials> AssumeRoleWithWebIdentity(const WebIdentitySettings& settings,
                                                        const HttpFetch& fetch);

struct ContainerSettings {
  std::string url;  // http://169.254.170.2<relative URI>, or the full URI
  /// Sent as the Authorization header: the file's content (read at every call, trimmed) if
  /// `authorization_token_file` is set, else `authorization_token`, else nothing.
  std::string authorization_token;
  std::string authorization_token_file;
};

/// GETs `url` and reads the JSON reply (AccessKeyId, SecretAccessKey, Token, Expiration).
arrow::Result<AwsCredentials> FetchContainerCredentials(const ContainerSettings& settings,
                                                        const HttpFetch& fetch);

/// IMDSv2 at `endpoint` ("http://169.254.169.254", no trailing slash): PUT /latest/api/token
/// (X-aws-ec2-metadata-token-ttl-seconds), then with that token (X-aws-ec2-metadata-token)
/// GET /latest/meta-data/iam/security-credentials/ for the role's name and
/// GET .../security-credentials/<role> for its JSON credentials. No IMDSv1 fallback.
arrow::Result<AwsCredentials> FetchInstanceCredentials(const std::string& endpoint,
                                                       const HttpFetch& fetch);

}  // namespace timelake
