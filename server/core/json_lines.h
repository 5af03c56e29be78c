// One JSON object per closed window or event, the lines of the daemon's
// JSON-lines sink (docs/sinks.md has the schema).
#ifndef TORCHMON_SERVER_CORE_JSON_LINES_H_
#define TORCHMON_SERVER_CORE_JSON_LINES_H_

#include <string>

#include "server/core/event_log.h"
#include "server/core/types.h"

namespace torchmon::server {

// {"k":"v",...}: a label set as a JSON object, keys in order.
std::string LabelsJson(const Labels& labels);

// {"type":"window","stat":...,"labels":{...},"start_ms":...,"end_ms":...,
//  "start":"<RFC 3339>","end":"<RFC 3339>","partial":false,"accepted":N,
//  "capped":N,"aggregates":{"mean":...,...}} without a trailing newline.
std::string WindowJsonLine(const ClosedWindow& window);

// {"type":"event","name":...,"labels":{...},"timestamp_us":...,
//  "timestamp":"<RFC 3339>","sequence":N,"data":{...},"data_types":{...}};
// string fields as JSON strings, numbers as numbers, booleans as true/false;
// data_types names each field's type ("string", "int", "double", "bool").
std::string EventJsonLine(const EventRecord& event);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_JSON_LINES_H_
