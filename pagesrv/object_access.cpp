#include "object_access.hpp"

#include <algorithm>

namespace ferry::pagesrv {

namespace {

constexpr size_t max_members = 16; // a migration has two or three parties

bool is_member(const std::vector<std::string>& members, const std::string& peer) {
    return std::find(members.begin(), members.end(), peer) != members.end();
}

} // namespace

bool object_access::admit_write(uint64_t object, const std::string& peer) {
    if (peer.empty())
        return false;
    std::lock_guard lock(_mutex);
    auto& members = _members[object];
    if (members.empty())
        members.push_back(peer);
    return is_member(members, peer);
}

bool object_access::admit_read(uint64_t object, const std::string& peer) const {
    std::lock_guard lock(_mutex);
    auto it = _members.find(object);
    return it == _members.end() || is_member(it->second, peer);
}

bool object_access::grant(uint64_t object, const std::string& by, const std::string& to) {
    if (!admit_write(object, by) || to.empty())
        return false;
    std::lock_guard lock(_mutex);
    auto& members = _members[object];
    if (!is_member(members, to)) {
        if (members.size() >= max_members)
            return false;
        members.push_back(to);
    }
    return true;
}

void object_access::forget(uint64_t object) {
    std::lock_guard lock(_mutex);
    _members.erase(object);
}

} // namespace ferry::pagesrv
