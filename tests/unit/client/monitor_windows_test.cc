// StatWindows (torchmon/monitor_windows.h), torch::monitor's windows of one
// Stat, on a clock the test drives: each case of torch's counters.h
// behaviour at exact times, with no sleeping.
#include "torchmon/monitor_windows.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace torchmon::monitor {
namespace {

using Windows = StatWindows<double>;
using std::chrono::milliseconds;

// StatWindows<T> with the windows each call logged kept beside it, as a
// stat's add() keeps them on its stack.
template <typename T>
class Driven {
 public:
  Driven(milliseconds window, int64_t max_samples) : w_(window, max_samples) {}
  int AddAt(T v, int64_t now_ms) { return w_.AddAt(v, now_ms, logged_); }
  int Close() { return w_.Close(logged_); }
  // The windows the last call logged, oldest first.
  const typename StatWindows<T>::Values& logged(int i) const {
    EXPECT_LT(i, logged_.count);
    return logged_.windows[i];
  }
  int64_t count() const { return w_.count(); }
  const typename StatWindows<T>::Values& last_logged() const { return w_.last_logged(); }

 private:
  StatWindows<T> w_;
  typename StatWindows<T>::Logged logged_;
};

// A steady-clock time at the start of a window of `window_ms`.
constexpr int64_t kT0 = 1'000'000'000;

TEST(StatWindowsTest, AWindowIsLoggedByTheFirstAddAfterItsEnd) {
  Driven<double> w(milliseconds(10), kNoCap);
  EXPECT_EQ(w.AddAt(2, kT0), 0);
  EXPECT_EQ(w.AddAt(3, kT0 + 9), 0) << "still the same window";
  EXPECT_EQ(w.count(), 2);
  EXPECT_EQ(w.last_logged().count, 0) << "get() answers zeros until a window is logged";

  ASSERT_EQ(w.AddAt(4, kT0 + 10), 1);
  EXPECT_EQ(w.logged(0).count, 2);
  EXPECT_EQ(w.logged(0).sum, 5);
  EXPECT_EQ(w.logged(0).value, 3);
  EXPECT_EQ(w.last_logged().Get(Aggregation::MEAN), 2.5);
  EXPECT_EQ(w.count(), 1) << "4 is the first sample of the next window";
}

TEST(StatWindowsTest, OneMillisecondWindowsLogEachAddAfterAGap) {
  Driven<double> w(milliseconds(1), kNoCap);
  for (int v = 1; v <= 5; ++v) {
    const int logged = w.AddAt(v, kT0 + 3 * v);
    if (v == 1) {
      EXPECT_EQ(logged, 0);
    } else {
      ASSERT_EQ(logged, 1) << v;
      EXPECT_EQ(w.logged(0).sum, v - 1);
      EXPECT_EQ(w.logged(0).count, 1);
    }
  }
  EXPECT_EQ(w.Close(), 1);
  EXPECT_EQ(w.logged(0).sum, 5);
}

TEST(StatWindowsTest, MaxSamplesLogsTheWindowAtOnceAndLaterSamplesOfItAreNotCounted) {
  Driven<double> w(milliseconds(1000), 3);
  EXPECT_EQ(w.AddAt(1, kT0), 0);
  EXPECT_EQ(w.AddAt(2, kT0 + 1), 0);
  ASSERT_EQ(w.AddAt(3, kT0 + 2), 1) << "the third sample reaches the cap";
  EXPECT_EQ(w.logged(0).sum, 6);
  EXPECT_EQ(w.count(), 0);
  EXPECT_EQ(w.AddAt(100, kT0 + 3), 0) << "its window was logged: not counted";
  EXPECT_EQ(w.count(), 0);
  EXPECT_EQ(w.last_logged().sum, 6);

  // The next window counts again; an empty one logged after it makes get()
  // answer zeros, and no event.
  EXPECT_EQ(w.AddAt(7, kT0 + 1000), 0);
  EXPECT_EQ(w.count(), 1);
  ASSERT_EQ(w.AddAt(8, kT0 + 2000), 1);
  EXPECT_EQ(w.logged(0).sum, 7);
  EXPECT_EQ(w.AddAt(9, kT0 + 4000), 1);
  EXPECT_EQ(w.logged(0).sum, 8);
}

TEST(StatWindowsTest, TheAddThatEndsAWindowAndTheOneThatFillsTheNextEachLogOne) {
  Driven<double> w(milliseconds(10), 1);
  ASSERT_EQ(w.AddAt(1, kT0), 1) << "a cap of one logs every counted sample";
  EXPECT_EQ(w.AddAt(2, kT0 + 5), 0) << "capped: not counted";
  ASSERT_EQ(w.AddAt(3, kT0 + 10), 1);
  EXPECT_EQ(w.logged(0).sum, 3);

  Driven<double> two(milliseconds(10), 2);
  EXPECT_EQ(two.AddAt(1, kT0), 0);
  ASSERT_EQ(two.AddAt(2, kT0 + 10), 1);  // logs [1], holds 2
  EXPECT_EQ(two.logged(0).sum, 1);
  ASSERT_EQ(two.AddAt(3, kT0 + 10), 1);  // fills the cap: logs [2, 3]
  EXPECT_EQ(two.logged(0).sum, 5);
  EXPECT_EQ(two.count(), 0);
}

TEST(StatWindowsTest, AnEmptyWindowBetweenTwoIsLoggedWithoutAnEvent) {
  Driven<double> w(milliseconds(10), kNoCap);
  w.AddAt(1, kT0);
  ASSERT_EQ(w.AddAt(2, kT0 + 35), 1) << "only the window with a sample is reported";
  EXPECT_EQ(w.logged(0).sum, 1);
  EXPECT_EQ(w.count(), 1);
  EXPECT_EQ(w.Close(), 1);
  EXPECT_EQ(w.Close(), 0) << "nothing left";
  EXPECT_EQ(w.last_logged().count, 0) << "get() answers zeros after an empty log";
}

TEST(StatWindowsTest, MaxAndMinKeepTorchsComparisonsWithNan) {
  Driven<double> w(milliseconds(10), kNoCap);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  w.AddAt(nan, kT0);
  w.AddAt(1, kT0 + 1);
  w.AddAt(nan, kT0 + 2);
  w.AddAt(-2, kT0 + 3);
  ASSERT_EQ(w.AddAt(0, kT0 + 10), 1);
  const Windows::Values& v = w.logged(0);
  // The first sample sets max and min; a NaN compares false afterwards.
  EXPECT_TRUE(std::isnan(v.max)) << "a NaN first stays: 1 < NaN is false";
  EXPECT_TRUE(std::isnan(v.min));
  EXPECT_TRUE(std::isnan(v.sum));
  EXPECT_EQ(v.count, 4);
  EXPECT_EQ(v.value, -2);
}

TEST(StatWindowsTest, IntegerStatsDivideAsIntegers) {
  Driven<int64_t> w(milliseconds(10), kNoCap);
  for (int64_t v : {7, 2, 4}) w.AddAt(v, kT0);
  ASSERT_EQ(w.Close(), 1);
  EXPECT_EQ(w.logged(0).Get(Aggregation::MEAN), 4);  // 13 / 3
  EXPECT_EQ(w.logged(0).Get(Aggregation::COUNT), 3);
  EXPECT_EQ(w.logged(0).Get(Aggregation::NONE), 0);
}

}  // namespace
}  // namespace torchmon::monitor
