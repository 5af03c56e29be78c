#include "torchmon/client.h"

#include <memory>
#include <utility>

#include "detail/client_core.h"

namespace torchmon {

Client::Client(ClientOptions options)
    : core_(std::make_shared<detail::ClientCore>(std::move(options))) {}

Client::Client(std::shared_ptr<detail::ClientCore> core) : core_(std::move(core)) {}

Client::~Client() {
  if (core_->InForkedChild()) {
    // The sender and reader threads were not copied by fork(); joining or
    // flushing through them would hang, so the core is deliberately leaked.
    new std::shared_ptr<detail::ClientCore>(std::move(core_));
    return;
  }
  core_->Shutdown();
}

Client& Client::Default() {
  // Destroyed at exit, which flushes what the process recorded.
  static Client client;
  return client;
}

absl::Status Client::Flush(std::chrono::milliseconds timeout) { return core_->Flush(timeout); }

void Client::LogEvent(const Event& event) { core_->LogEvent(event); }

ClientStats Client::Stats() const { return core_->Stats(); }

std::vector<std::string> Client::TakeErrors() { return core_->TakeErrors(); }

const std::string& Client::target() const { return core_->target(); }

const Labels& Client::labels() const { return core_->labels(); }

void log_event(const Event& event) { Client::Default().LogEvent(event); }

}  // namespace torchmon
