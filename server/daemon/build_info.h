// What torchmond was built from: `torchmond --version --verbose`.
#pragma once

#include <string>

namespace torchmon::server {

// Lines naming torchmond's version, the compiler and C++ runtime it was built
// with, the libraries it runs with and their versions (as those libraries
// report them), and, for the portable build, the Debian source packages the
// bundled libraries were built from (deploy/release/deps.lock). Ends in "\n".
std::string VerboseVersion();

}  // namespace torchmon::server
