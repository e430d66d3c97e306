#include "image_names.hpp"

#include <array>

namespace ferry::pagesrv {

namespace {

// What the incoming session writes into its directory itself.
constexpr std::array<std::string_view, 5> session_files = {
    "lazy-pages.socket", "gate.socket", "lazy-pages.log", "restore.log", "criu-restore.conf"};

bool plain_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '+' || c == '-';
}

} // namespace

bool acceptable_image_name(std::string_view name) noexcept {
    if (name.empty() || name.size() >= 256 || name.front() == '.')
        return false;
    for (char c : name)
        if (!plain_char(c))
            return false;
    for (auto own : session_files)
        if (name == own)
            return false;
    return !name.ends_with(".socket");
}

} // namespace ferry::pagesrv
