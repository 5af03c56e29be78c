// TensorBoard event files without TensorFlow: TFRecord framing and the few
// fields of tensorflow.Event that scalar curves need, encoded by hand in
// protobuf wire format (docs/sinks.md).
//
//   record := uint64 length (LE) | uint32 masked CRC-32C of the length (LE)
//             | data | uint32 masked CRC-32C of the data (LE)
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//
// Hand-encoded rather than generated: four fields of three messages do not
// justify vendoring TensorFlow's event.proto (and its imports) into the build.
#ifndef TORCHMON_SERVER_SINKS_TFRECORD_H_
#define TORCHMON_SERVER_SINKS_TFRECORD_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace torchmon::server {

// `data` framed as one TFRecord.
std::string TfRecord(absl::string_view data);

// The Event every event file starts with: file_version "brain.Event:2".
std::string FileVersionEvent(double wall_time);

// An Event holding one scalar summary value per (tag, value).
std::string ScalarsEvent(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SINKS_TFRECORD_H_
