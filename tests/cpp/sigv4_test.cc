// SigV4 against the four examples AWS publishes for S3 ("Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk", examplebucket, 2013-05-24):
// GET object with Range, PUT object, GET bucket lifecycle, GET bucket (list objects).
#include "timelake/store/s3/sigv4.h"

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

TEST(SigV4Test, PutObjectMatchesTheAwsExample) {
  const std::string payload_hash = Sha256Hex("Welcome to Amazon S3.");
  EXPECT_EQ(payload_hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request r;
  r.method = "PUT";
  r.path = "/test%24file.text";  // the key "test$file.text", encoded as sent
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-content-sha256", payload_hash},
               {"x-amz-date", "20130524T000000Z"},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  r.payload_hash = payload_hash;
  EXPECT_EQ(CanonicalRequest(r),
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
            "host:examplebucket.s3.amazonaws.com\nx-amz-content-sha256:" + payload_hash +
            "\nx-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n" + payload_hash);
  // The last line of the published string to sign.
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(SigV4Authorization(r, kExample, "20130524T000000Z", "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
            "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, GetBucketLifecycleMatchesTheAwsExample) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"lifecycle", ""}};  // "?lifecycle" is signed as "lifecycle="
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmptyHash},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:" + kEmptyHash + "\nx-amz-date:20130524T000000Z\n\n"
            "host;x-amz-content-sha256;x-amz-date\n" + kEmptyHash);
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(SigV4Authorization(r, kExample, "20130524T000000Z", "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
            "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, ListObjectsMatchesTheAwsExample) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmptyHash},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/\nmax-keys=2&prefix=J\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:" + kEmptyHash + "\nx-amz-date:20130524T000000Z\n\n"
            "host;x-amz-content-sha256;x-amz-date\n" + kEmptyHash);
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(SigV4Authorization(r, kExample, "20130524T000000Z", "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
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
