// A move-only owner of one mmap'ed region, made by named factories. The
// destructor unmaps; nothing else in Ferry calls munmap by hand.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>

namespace ferry {

class mapping {
  public:
    mapping() noexcept = default;
    // Private anonymous memory of `bytes`, readable and writable, with
    // `extra_flags` (MAP_POPULATE, MAP_NORESERVE); throws std::system_error
    // naming `what`.
    static mapping anonymous(size_t bytes, const std::string& what, int extra_flags = 0);
    // `bytes` of `fd` from offset 0 with `prot` and `flags` (MAP_SHARED,
    // MAP_POPULATE, ...); throws std::system_error naming `what`.
    static mapping of_file(int fd, size_t bytes, int prot, int flags, const std::string& what);

    mapping(mapping&& o) noexcept : _base(std::exchange(o._base, nullptr)), _size(o._size) {}
    mapping& operator=(mapping&& o) noexcept {
        if (this != &o) {
            reset();
            _base = std::exchange(o._base, nullptr);
            _size = o._size;
        }
        return *this;
    }
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping() { reset(); }

    // Grows a file mapping to `bytes` (the file must be that long), moving it
    // if it must: pointers into it are stale afterwards. With `populate`,
    // only the new part is populated. Throws std::system_error naming `what`.
    void grow(size_t bytes, bool populate, const std::string& what);

    [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(_base); }
    [[nodiscard]] size_t size() const noexcept { return _size; }
    [[nodiscard]] explicit operator bool() const noexcept { return _base != nullptr; }

    void reset() noexcept {
        if (_base)
            ::munmap(_base, _size);
        _base = nullptr;
        _size = 0;
    }

  private:
    mapping(void* base, size_t size) noexcept : _base(base), _size(size) {}
    void* _base = nullptr;
    size_t _size = 0;
};

} // namespace ferry
