// Which file names a peer may give the images it sends: the session
// directory's files are written under these names, so none may leave the
// directory or replace what the session itself keeps there.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::pagesrv {

// A plain name (letters, digits, . _ + -, not starting with a dot, under 256
// bytes) that is none of the session's own files (its sockets, logs and
// CRIU config).
[[nodiscard]] bool acceptable_image_name(std::string_view name) noexcept;

// The largest image file a peer may write (offset + length): a sparse file
// is no way to fill the disk.
inline constexpr uint64_t max_image_file_bytes = uint64_t(64) << 30;

} // namespace ferry::pagesrv
