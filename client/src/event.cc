#include <chrono>
#include <utility>
#include <variant>

#include "torchmon/client.h"

namespace torchmon {

Event::Event(std::string name, std::map<std::string, EventValue> data,
             std::chrono::system_clock::time_point timestamp)
    : name(std::move(name)), timestamp(timestamp), data(std::move(data)) {}

}  // namespace torchmon
