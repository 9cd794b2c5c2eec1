#include "timelake/store/cloud_common.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <curl/curl.h>

#include "timelake/util/encoding.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

std::optional<std::string> EnvValue(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::string UpperKey(std::string key) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return key;
}

StorageOptions WithEnvironment(const StorageOptions& options,
                               const std::vector<std::string>& keys) {
  StorageOptions out = options;
  for (const auto& key : keys) {
    if (out.count(key)) continue;
    if (auto v = EnvValue(UpperKey(key))) out[key] = *v;
  }
  return out;
}

std::string OptionValue(const StorageOptions& options, const std::string& key) {
  auto it = options.find(key);
  return it == options.end() ? std::string() : it->second;
}

namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Keys of one cloud's options, by the prefixes of their names.
bool IsCloudKey(const std::string& key) {
  return StartsWith(key, "aws_") || StartsWith(key, "azure_") || StartsWith(key, "google_") ||
         StartsWith(key, "service_account") || key == "access_key" ||
         key == "delta_dynamo_table_name";
}

}  // namespace

arrow::Status RefuseOtherClouds(const StorageOptions& options,
                                const std::vector<std::string>& own_prefixes,
                                const std::vector<std::string>& own_keys,
                                const std::string& lake_kind) {
  for (const auto& [key, value] : options) {
    if (!IsCloudKey(key)) continue;
    bool own = std::find(own_keys.begin(), own_keys.end(), key) != own_keys.end();
    for (const auto& p : own_prefixes) own = own || StartsWith(key, p);
    if (!own) {
      return arrow::Status::Invalid("storage option '", key, "' is for another cloud; ", lake_kind,
                                    " takes ", own_prefixes.front(), "* options");
    }
  }
  return arrow::Status::OK();
}

arrow::Result<bool> BoolOption(const StorageOptions& options, const std::string& key,
                               bool fallback) {
  const std::string v = OptionValue(options, key);
  if (v.empty()) return fallback;
  return ParseBoolOption(key, v);
}

arrow::Status ApplyClientOptions(const StorageOptions& options, HttpClientOptions* http,
                                 RetryOptions* retry) {
  auto get = [&](const std::string& key) { return OptionValue(options, key); };
  // A store's own flag (aws_allow_http, …) set before this call also allows it.
  ARROW_ASSIGN_OR_RAISE(bool allow_http, BoolOption(options, "allow_http", false));
  http->allow_http = http->allow_http || allow_http;
  ARROW_ASSIGN_OR_RAISE(http->allow_invalid_certificates,
                        BoolOption(options, "allow_invalid_certificates", false));
  if (!get("timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->request_timeout_ms, ParseDurationMs("timeout", get("timeout")));
  }
  if (!get("connect_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->connect_timeout_ms,
                          ParseDurationMs("connect_timeout", get("connect_timeout")));
  }
  if (!get("pool_idle_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->pool_idle_timeout_ms,
                          ParseDurationMs("pool_idle_timeout", get("pool_idle_timeout")));
  }
  if (!get("retry_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(retry->max_total_ms, ParseDurationMs("retry_timeout", get("retry_timeout")));
  }
  if (!get("max_retries").empty()) {
    char* end = nullptr;
    const long n = std::strtol(get("max_retries").c_str(), &end, 10);
    if (*end || n < 0 || n > 100) {
      return arrow::Status::Invalid("storage option 'max_retries' must be a whole number from 0 "
                                    "to 100");
    }
    retry->max_retries = static_cast<int>(n);
  }
  http->proxy_url = get("proxy_url");
  if (!get("user_agent").empty()) http->user_agent = get("user_agent");
  http->stall_timeout_ms = std::min<int64_t>(http->stall_timeout_ms, http->request_timeout_ms);
  return arrow::Status::OK();
}

int64_t ParseServiceTimeMs(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &day, &hour, &minute,
                  &second, &consumed) == 6) {
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
    const char* fraction = text.c_str() + consumed;
    if (*fraction == '.') {
      int scale = 100;
      for (const char* p = fraction + 1; std::isdigit(static_cast<unsigned char>(*p)) && scale > 0;
           ++p) {
        ms += (*p - '0') * scale;
        scale /= 10;
      }
    }
    return ms;
  }
  const time_t seconds = curl_getdate(text.c_str(), nullptr);
  if (seconds >= 0) return static_cast<int64_t>(seconds) * 1000;
  return NowMillis();
}

std::string HttpDate(int64_t unix_seconds) {
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

bool HasDotSegment(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view segment(path.data() + start, end - start);
    if (segment == "." || segment == "..") return true;
    start = end + 1;
  }
  return false;
}

arrow::Status SplitBucketAndPrefix(const std::string& url, const std::string& rest,
                                   const std::string& example, std::string* bucket,
                                   std::string* prefix) {
  const auto slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  std::string p = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (bucket->empty()) {
    return arrow::Status::Invalid("lake location '", url, "' names no bucket or container; write ",
                                  example);
  }
  if (p.find("//") != std::string::npos || (!p.empty() && p.front() == '/')) {
    return arrow::Status::Invalid("lake location '", url, "' has an empty path segment");
  }
  *prefix = p;
  return arrow::Status::OK();
}

arrow::Status WriteFailure(arrow::Status status, const RetryOutcome& outcome) {
  return outcome.maybe_applied ? OutcomeUnknown(status) : status;
}

std::function<ReplyVerdict(const HttpResponse&)> RetryOnceWithFreshToken(
    std::function<bool()> invalidate, std::function<ReplyVerdict(const HttpResponse&)> judge) {
  auto refreshed = std::make_shared<bool>(false);
  return [refreshed, invalidate = std::move(invalidate),
          judge = std::move(judge)](const HttpResponse& reply) {
    if (reply.status == 401 && !*refreshed) {
      *refreshed = true;
      if (invalidate()) return ReplyVerdict::kTransient;
    }
    return judge(reply);
  };
}

// ---- RangedInput -------------------------------------------------------------------------------

arrow::Status RangedInput::Seek(int64_t position) {
  if (position < 0) return arrow::Status::Invalid("negative seek position");
  position_ = position;
  return arrow::Status::OK();
}

arrow::Result<int64_t> RangedInput::GetSize() {
  std::lock_guard<std::mutex> lock(size_mutex_);
  if (size_ < 0) {
    ARROW_ASSIGN_OR_RAISE(auto meta, store_->Head(path_));
    size_ = meta.size;
  }
  return size_;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> RangedInput::ReadAt(int64_t position, int64_t nbytes) {
  if (closed_) return arrow::Status::Invalid("read from a closed file (", path_, ")");
  return store_->GetRange(path_, position, nbytes);
}

arrow::Result<int64_t> RangedInput::ReadAt(int64_t position, int64_t nbytes, void* out) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position, nbytes));
  std::memcpy(out, buffer->data(), static_cast<size_t>(buffer->size()));
  return buffer->size();
}

arrow::Result<std::shared_ptr<arrow::Buffer>> RangedInput::Read(int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
  position_ += buffer->size();
  return buffer;
}

arrow::Result<int64_t> RangedInput::Read(int64_t nbytes, void* out) {
  ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position_, nbytes, out));
  position_ += n;
  return n;
}

// ---- MultipartOutput ---------------------------------------------------------------------------

arrow::Status MultipartOutput::Write(const void* data, int64_t nbytes) {
  if (closed_) {
    return arrow::Status::Invalid("write to a closed output stream (", uploader_->Describe(), ")");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (nbytes > 0) {
    // A full buffer goes out only now that more bytes follow it (see the class comment).
    if (buffer_.length() == part_size_) ARROW_RETURN_NOT_OK(SendPart(/*last=*/false));
    const int64_t take = std::min(nbytes, part_size_ - buffer_.length());
    ARROW_RETURN_NOT_OK(buffer_.Append(bytes, take));
    bytes += take;
    nbytes -= take;
    written_ += take;
  }
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::SendPart(bool last) {
  if (!begun_) {
    auto id = uploader_->Begin();
    if (!id.ok()) return Fail(id.status());
    upload_id_ = *id;
    begun_ = true;
  }
  auto status = WaitForParts(static_cast<size_t>(std::max(1, uploader_->Parallelism()) - 1));
  if (!status.ok()) return Fail(status);
  std::shared_ptr<arrow::Buffer> part;
  ARROW_RETURN_NOT_OK(buffer_.Finish(&part));
  const int number = next_part_++;
  const int64_t offset = sent_;
  sent_ += part->size();
  PartUploader* uploader = uploader_.get();
  const std::string id = upload_id_;
  try {
    in_flight_.push_back(Part{number, std::async(std::launch::async,
                                                 [uploader, id, number, offset, part, last] {
                                                   return uploader->UploadPart(id, number, offset,
                                                                               part, last);
                                                 })});
  } catch (const std::exception& e) {  // no thread could be started
    return Fail(arrow::Status::IOError("sending part ", number, " of ", uploader_->Describe(),
                                       ": ", e.what()));
  }
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::WaitForParts(size_t at_most) {
  arrow::Status first;
  while (in_flight_.size() > at_most) {
    Part part = std::move(in_flight_.front());
    in_flight_.pop_front();
    auto token = part.token.get();
    if (!token.ok()) {
      if (first.ok()) first = token.status();
    } else {
      done_.emplace_back(part.number, *token);
    }
  }
  return first;
}

arrow::Status MultipartOutput::Close() {
  if (closed_) return failure_;
  if (!begun_) {
    std::shared_ptr<arrow::Buffer> whole;
    ARROW_RETURN_NOT_OK(buffer_.Finish(&whole));
    closed_ = true;
    failure_ = uploader_->PutWhole(std::move(whole));
    return failure_;
  }
  ARROW_RETURN_NOT_OK(SendPart(/*last=*/true));
  auto status = WaitForParts(0);
  if (!status.ok()) return Fail(status);
  std::sort(done_.begin(), done_.end());
  status = uploader_->Complete(upload_id_, done_, written_);
  if (!status.ok()) return Fail(status);
  closed_ = true;
  begun_ = false;
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::Abort() {
  if (closed_) return arrow::Status::OK();
  closed_ = true;
  (void)WaitForParts(0);
  buffer_.Reset();
  if (!begun_) return arrow::Status::OK();
  begun_ = false;
  return uploader_->Abort(upload_id_);
}

}  // namespace timelake
