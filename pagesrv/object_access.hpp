// Who may touch a pooled object on this pool node: the authenticated peers
// that are part of its migration. The first peer to write or grant an
// object becomes its member; a member may let another peer in (the source
// daemon lets the destination read what it pushes; an unparking migrator
// lets the restoring host read the parked pages). Without membership a
// peer's gets, puts, grants and drops of the object are refused.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry::pagesrv {

class object_access {
  public:
    // A write (put): admitted if `peer` is a member, or the object has none
    // yet (it becomes the first).
    [[nodiscard]] bool admit_write(uint64_t object, const std::string& peer);
    // A read or drop: admitted for members; an object nobody wrote has
    // nothing to protect (it is not found).
    [[nodiscard]] bool admit_read(uint64_t object, const std::string& peer) const;
    // `by` lets `to` in; refused unless `by` may write.
    [[nodiscard]] bool grant(uint64_t object, const std::string& by, const std::string& to);
    // After a drop: the object is nobody's.
    void forget(uint64_t object);

  private:
    mutable std::mutex _mutex;
    std::unordered_map<uint64_t, std::vector<std::string>> _members;
};

} // namespace ferry::pagesrv
