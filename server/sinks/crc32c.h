// CRC-32C (Castagnoli), as TFRecord files frame their records with it.
#ifndef TORCHMON_SERVER_SINKS_CRC32C_H_
#define TORCHMON_SERVER_SINKS_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace torchmon::server {

// CRC-32C of `data` (polynomial 0x1EDC6F41, reflected; RFC 3720 B.4).
uint32_t Crc32c(absl::string_view data);

// TFRecord's masked form of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
// Masking keeps a CRC of data that itself holds CRCs from being trivial.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SINKS_CRC32C_H_
