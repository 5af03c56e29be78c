// Comparing secrets without telling where they differ: shared by the token
// and password checks (auth.h) and bcrypt's digest check (bcrypt.h).
#ifndef TORCHMON_SERVER_AUTH_CONSTANT_TIME_H_
#define TORCHMON_SERVER_AUTH_CONSTANT_TIME_H_

#include "absl/strings/string_view.h"

namespace torchmon::server {

// True if `a` equals `b`. The time taken depends on the lengths only, never
// on where the first difference is, so that a caller probing a secret learns
// nothing from the timing but its length. Pure; thread-safe.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_AUTH_CONSTANT_TIME_H_
