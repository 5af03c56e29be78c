// The window rule (DESIGN.md, docs/semantics.md), in one place for the
// daemon's aggregator and the Python module's in-process windows: a stat
// with windows of w ms puts a sample stamped t µs into window
// k = floor(floor(t / 1000) / w), which covers [k·w, (k+1)·w) ms since the
// Unix epoch, so every rank's windows line up. Floor, not truncation:
// timestamps before 1970 (a client with a broken clock) get the right
// window too.
#ifndef TORCHMON_PROTOCOL_WINDOWS_H_
#define TORCHMON_PROTOCOL_WINDOWS_H_

#include <cstdint>

namespace torchmon::protocol {

// a / b rounded towards negative infinity; b > 0.
constexpr int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// The index of the window of `window_ms` that holds `timestamp_us`.
constexpr int64_t WindowIndex(int64_t timestamp_us, int64_t window_ms) {
  return FloorDiv(FloorDiv(timestamp_us, 1000), window_ms);
}

// Where window `index` of `window_ms` starts, in ms and in µs since the
// epoch; it ends where window index + 1 starts.
constexpr int64_t WindowStartMs(int64_t index, int64_t window_ms) { return index * window_ms; }
constexpr int64_t WindowStartUs(int64_t index, int64_t window_ms) {
  return index * window_ms * 1000;
}

}  // namespace torchmon::protocol

#endif  // TORCHMON_PROTOCOL_WINDOWS_H_
