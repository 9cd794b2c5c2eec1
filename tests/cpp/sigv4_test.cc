// SigV4 against the examples AWS publishes for S3 ("Signature Calculations for the Authorization
// Header: Transferring Payload in a Single Chunk", examplebucket, 2013-05-24).
#include "timelake/store/sigv4.h"

#include <gtest/gtest.h>

namespace timelake::testing {
namespace {

const SigV4Credentials kExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
const std::string kEmptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(SigV4Test, EmptyPayloadHash) { EXPECT_EQ(Sha256Hex(""), kEmptyHash); }

TEST(SigV4Test, GetObjectWithRangeMatchesTheAwsExample) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptyHash},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:" + kEmptyHash + "\nx-amz-date:20130524T000000Z\n\n"
            "host;range;x-amz-content-sha256;x-amz-date\n" + kEmptyHash);
  EXPECT_EQ(SigV4Authorization(r, kExample, "20130524T000000Z", "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, QueryParametersAreEncodedAndSorted) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"prefix", "ns/t/_delta_log/"}, {"list-type", "2"}, {"start-after", "a b"}};
  r.headers = {{"host", "h"}};
  r.payload_hash = "UNSIGNED-PAYLOAD";
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/\nlist-type=2&prefix=ns%2Ft%2F_delta_log%2F&start-after=a%20b\nhost:h\n\nhost\n"
            "UNSIGNED-PAYLOAD");
}

}  // namespace
}  // namespace timelake::testing
