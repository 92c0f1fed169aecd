// RequestBatcher's rule (request_batcher.hpp) and the request parser. The batcher's wait is set
// to an hour where a test needs "runs at once": waiting would hang the test into its TIMEOUT,
// so these checks need no clock.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "hpctrain/serve/request_batcher.hpp"
#include "hpctrain/serve/request_parsing.hpp"

namespace hpctrain::serve {
namespace {

std::shared_ptr<PendingRequest> request(std::int64_t rows) {
  auto r = std::make_shared<PendingRequest>();
  r->rows = rows;
  return r;
}

constexpr auto kHour = std::chrono::microseconds(std::chrono::hours(1));

TEST(RequestBatcher, IdleServerRunsALoneRequestAtOnce) {
  RequestBatcher b(64, kHour);
  b.announce();
  b.submit(request(3));
  const RequestBatch batch = b.next_batch();  // nobody else is parsing: no wait
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->rows, 3);
}

TEST(RequestBatcher, TakesQueuedRequestsUpToMaxBatchInOrder) {
  RequestBatcher b(8, kHour);
  for (std::int64_t rows : {3, 4, 2, 5}) {
    b.announce();
    b.submit(request(rows));
  }
  const RequestBatch first = b.next_batch();
  ASSERT_EQ(first.size(), 2u);  // 3 + 4 fit in 8; with the 2 it would be 9
  EXPECT_EQ(first[0]->rows, 3);
  EXPECT_EQ(first[1]->rows, 4);
  const RequestBatch second = b.next_batch();
  ASSERT_EQ(second.size(), 2u);  // 2 + 5 = 7
  EXPECT_EQ(second[1]->rows, 5);
}

TEST(RequestBatcher, ALargerRequestRunsAlone) {
  RequestBatcher b(4, kHour);
  b.announce();
  b.submit(request(10));
  b.announce();
  b.submit(request(1));
  EXPECT_EQ(b.next_batch().size(), 1u);
  EXPECT_EQ(b.next_batch().size(), 1u);
}

TEST(RequestBatcher, WaitsForARequestStillBeingParsed) {
  RequestBatcher b(64, kHour);
  b.announce();
  b.submit(request(1));
  b.announce();  // a second request is on its way
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    b.submit(request(2));
  });
  const RequestBatch batch = b.next_batch();
  late.join();
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[1]->rows, 2);
}

TEST(RequestBatcher, AWithdrawnRequestEndsTheWait) {
  RequestBatcher b(64, kHour);
  b.announce();
  b.submit(request(1));
  b.announce();
  std::thread bad([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    b.withdraw();  // it was a bad request
  });
  EXPECT_EQ(b.next_batch().size(), 1u);
  bad.join();
}

TEST(RequestBatcher, TheWaitIsBoundedByMaxWait) {
  RequestBatcher b(64, std::chrono::microseconds(1000));
  b.announce();
  b.submit(request(1));
  b.announce();  // never submitted: the batch still runs after max_wait
  EXPECT_EQ(b.next_batch().size(), 1u);
}

// Other ranks' takers (not preferred) take work when rank 0's taker is not waiting for it.
TEST(RequestBatcher, AnOtherRankTakesWhenRankZeroIsBusy) {
  RequestBatcher b(2, kHour);
  for (std::int64_t rows : {2, 2}) {
    b.announce();
    b.submit(request(rows));
  }
  const RequestBatch first = b.next_batch(false);  // no preferred taker waiting: no hang
  const RequestBatch second = b.next_batch(true);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(first[0], second[0]);
}

// A closed batcher releases a waiting non-preferred taker.
TEST(RequestBatcher, CloseReleasesOtherRanksTakers) {
  RequestBatcher b(2, kHour);
  std::thread other([&] { EXPECT_TRUE(b.next_batch(false).empty()); });
  b.close();
  other.join();
}

TEST(RequestBatcher, CloseDrainsThenReturnsEmpty) {
  RequestBatcher b(64, kHour);
  b.announce();
  b.submit(request(1));
  b.close();
  EXPECT_EQ(b.next_batch().size(), 1u);
  EXPECT_TRUE(b.next_batch().empty());
}

TEST(RequestParsing, AcceptsInstancesOfTheRightLength) {
  const ParsedInstances p = parse_predict_request(R"({"instances": [[0, 0.5, 1], [0.25, 0.125, 2e-3]]})", 3, 10);
  ASSERT_EQ(p.rows, 2);
  EXPECT_EQ(p.values, (std::vector<float>{0.0f, 0.5f, 1.0f, 0.25f, 0.125f, 2e-3f}));
}

// The direct scanner (the common body) and the DOM path (here: a body with one more key, which
// the scanner leaves to it) must read the same floats bit for bit.
TEST(RequestParsing, ScannerAndDomReadTheSameBits) {
  std::string numbers;
  std::mt19937_64 rng(5);
  std::vector<std::string> texts = {"0", "-0", "-0.0", "1", "-7", "123456789012", "18446744073709551615", "0.1", "1e-3", "5E-2", "-123.456e+2", "0.30000000000000004",
                                    "3.4028234663852886e38", "1.401298464324817e-45", "7.0000001", "2.5e-8"};
  for (int i = 0; i < 200; ++i) {
    char b[40];
    std::snprintf(b, sizeof b, "%.*g", static_cast<int>(rng() % 17) + 1, std::ldexp(static_cast<double>(rng() >> 11), -53));
    texts.push_back(b);
  }
  const auto width = static_cast<std::int64_t>(texts.size());
  std::string row;
  for (std::size_t i = 0; i < texts.size(); ++i) row += (i ? " ,\n" : "") + texts[i];
  const std::string fast = "{ \"instances\" :[ [" + row + "],[" + row + "] ] }\n";
  const std::string dom = "{\"x\": 1, \"instances\": [[" + row + "], [" + row + "]]}";
  const ParsedInstances a = parse_predict_request(fast, width, 10), b = parse_predict_request(dom, width, 10);
  ASSERT_EQ(a.rows, 2);
  ASSERT_EQ(b.rows, 2);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.values[i], &b.values[i], sizeof(float)), 0) << texts[i % texts.size()];
  }
}

TEST(RequestParsing, RefusesWithMessagesNamingTheProblem) {
  const auto message = [](const std::string& body) {
    try {
      parse_predict_request(body, 3, 2);
    } catch (const BadRequest& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("{").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message("[1, 2]").find("\"instances\""), std::string::npos);
  EXPECT_NE(message(R"({"instances": 3})").find("must be an array"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2]]})").find("instance 0 must be an array of 3 numbers, got 2"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 3], [1, true, 3]]})").find("instance 1 value 1 is not a number"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 1e39]]})").find("instance 0 value 2 is not finite"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 1e400]]})").find("malformed JSON"), std::string::npos);  // overflow
  EXPECT_NE(message(R"({"instances": [[1, 2, 01]]})").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, .5]]})").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, NaN]]})").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 3]]} x)").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 3],]})").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message(R"({"instances": [[1, 2, 3], [1, 2, 3], [1, 2, 3]]})").find("too many instances: 3 (at most 2"),
            std::string::npos);
}

TEST(RequestParsing, ResponseFloatsReadBackAsTheSameFloat32) {
  const float p[2] = {0.1f, 1.0f / 3.0f};
  const std::int32_t y[1] = {1};
  const std::string text = format_predict_response(p, y, 1, 2, 7);
  EXPECT_EQ(text, "{\"predictions\": [1], \"probabilities\": [[0.1, 0.33333334]], \"model_step\": 7}");
  EXPECT_EQ(format_error("bad \xff byte"), "{\"error\":\"bad \xEF\xBF\xBD byte\"}");
}

}  // namespace
}  // namespace hpctrain::serve
