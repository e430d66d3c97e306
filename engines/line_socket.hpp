// The unix sockets Ferry's daemon and migrator talk to the runc shim on (the
// commit gate, the hold before a checkpoint): one line each way per
// connection (engine_request.hpp lists the exchanges).
#pragma once

#include "core/unique_fd.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace ferry::engines {

// A listening unix stream socket at `path` (an old one there is replaced).
unique_fd listen_unix(const std::filesystem::path& path);
// One line from `conn` without its newline, at most 4096 bytes; throws
// ferry::error if none comes within `bound`. Empty if the peer closed.
std::string read_line(int conn, std::chrono::milliseconds bound);
// Best effort: the peer may be gone.
void write_line(int conn, const std::string& line) noexcept;
// The other side: connects to `path`, sends `line`, returns the answer's
// line (empty if the peer closed first). Throws ferry::error if it cannot
// connect or no answer comes within `bound`.
std::string ask_line(const std::filesystem::path& path, const std::string& line,
                     std::chrono::milliseconds bound);
// The same, where the answer may follow notes: each line equal to `note`
// goes to `on_note` and the wait goes on, within the same bound.
std::string ask_line_after_notes(const std::filesystem::path& path, const std::string& line,
                                 std::chrono::milliseconds bound, const std::string& note,
                                 const std::function<void()>& on_note);

} // namespace ferry::engines
