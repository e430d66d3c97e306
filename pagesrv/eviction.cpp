#include "eviction.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <random>
#include <vector>

namespace ferry::pagesrv {

namespace {

constexpr uint32_t nil = UINT32_MAX;

// Doubly linked lists of slots threaded through shared arrays: a slot is in
// at most one list at a time.
struct slot_links {
    explicit slot_links(uint32_t capacity) : prev(capacity, nil), next(capacity, nil) {}
    std::vector<uint32_t> prev, next;
};

struct slot_list {
    uint32_t head = nil, tail = nil;

    [[nodiscard]] bool empty() const noexcept { return head == nil; }
    void push_back(slot_links& l, uint32_t s) noexcept {
        l.prev[s] = tail;
        l.next[s] = nil;
        (tail == nil ? head : l.next[tail]) = s;
        tail = s;
    }
    void remove(slot_links& l, uint32_t s) noexcept {
        (l.prev[s] == nil ? head : l.next[l.prev[s]]) = l.next[s];
        (l.next[s] == nil ? tail : l.prev[l.next[s]]) = l.prev[s];
        l.prev[s] = l.next[s] = nil;
    }
};

// Tracks which slots are resident, so a policy ignores calls for others.
struct residency {
    explicit residency(uint32_t capacity) : in(capacity, false) {}
    bool add(uint32_t s) noexcept {
        if (s >= in.size() || in[s])
            return false;
        in[s] = true;
        return true;
    }
    bool drop(uint32_t s) noexcept {
        if (s >= in.size() || !in[s])
            return false;
        in[s] = false;
        return true;
    }
    [[nodiscard]] bool has(uint32_t s) const noexcept { return s < in.size() && in[s]; }
    std::vector<bool> in;
};

class list_policy : public eviction_policy {
  public:
    list_policy(uint32_t capacity, bool recency, std::string_view name)
        : _links(capacity), _res(capacity), _recency(recency), _name(name) {}
    void stored(uint32_t s) noexcept override {
        if (_res.add(s))
            _list.push_back(_links, s);
        else if (_recency)
            accessed(s);
    }
    void accessed(uint32_t s) noexcept override {
        if (!_recency || !_res.has(s))
            return;
        _list.remove(_links, s);
        _list.push_back(_links, s);
    }
    void removed(uint32_t s) noexcept override {
        if (_res.drop(s))
            _list.remove(_links, s);
    }
    std::optional<uint32_t> victim() noexcept override {
        if (_list.empty())
            return std::nullopt;
        const uint32_t s = _list.head;
        removed(s);
        return s;
    }
    std::string_view name() const noexcept override { return _name; }

  private:
    slot_links _links;
    residency _res;
    slot_list _list;
    bool _recency;
    std::string_view _name;
};

// O(1) LFU: buckets of equal frequency in ascending order, each a list of
// its slots oldest first. A read moves a slot to the bucket one higher.
class lfu_policy : public eviction_policy {
  public:
    explicit lfu_policy(uint32_t capacity)
        : _links(capacity), _res(capacity), _bucket_of(capacity, nil), _buckets(capacity + 1) {
        // One bucket per resident slot at most, plus the one a read creates
        // before it frees the bucket it leaves.
        for (uint32_t b = capacity + 1; b-- > 0;)
            _free.push_back(b);
    }
    void stored(uint32_t s) noexcept override {
        if (!_res.add(s)) {
            accessed(s);
            return;
        }
        uint32_t b = _first;
        if (b == nil || _buckets[b].freq != 1)
            b = new_bucket(1, nil, _first);
        place(s, b);
    }
    void accessed(uint32_t s) noexcept override {
        if (!_res.has(s))
            return;
        const uint32_t b = _bucket_of[s];
        uint32_t up = _buckets[b].next;
        if (up == nil || _buckets[up].freq != _buckets[b].freq + 1)
            up = new_bucket(_buckets[b].freq + 1, b, up);
        unplace(s);
        place(s, up);
    }
    void removed(uint32_t s) noexcept override {
        if (_res.drop(s))
            unplace(s);
    }
    std::optional<uint32_t> victim() noexcept override {
        if (_first == nil)
            return std::nullopt;
        const uint32_t s = _buckets[_first].slots.head;
        removed(s);
        return s;
    }
    std::string_view name() const noexcept override { return "lfu"; }

  private:
    struct bucket {
        uint32_t freq = 0;
        uint32_t prev = nil, next = nil;
        slot_list slots;
    };
    uint32_t new_bucket(uint32_t freq, uint32_t prev, uint32_t next) noexcept {
        const uint32_t b = _free.back(); // never empty: at most one bucket per resident slot
        _free.pop_back();
        _buckets[b] = bucket{freq, prev, next, {}};
        (prev == nil ? _first : _buckets[prev].next) = b;
        if (next != nil)
            _buckets[next].prev = b;
        return b;
    }
    void place(uint32_t s, uint32_t b) noexcept {
        _buckets[b].slots.push_back(_links, s);
        _bucket_of[s] = b;
    }
    void unplace(uint32_t s) noexcept {
        const uint32_t b = _bucket_of[s];
        _buckets[b].slots.remove(_links, s);
        _bucket_of[s] = nil;
        if (!_buckets[b].slots.empty())
            return;
        const bucket& e = _buckets[b];
        (e.prev == nil ? _first : _buckets[e.prev].next) = e.next;
        if (e.next != nil)
            _buckets[e.next].prev = e.prev;
        _free.push_back(b);
    }

    slot_links _links;
    residency _res;
    std::vector<uint32_t> _bucket_of;
    std::vector<bucket> _buckets;
    std::vector<uint32_t> _free;
    uint32_t _first = nil; // lowest frequency
};

// Stored pages start with their reference bit set: one sweep of grace.
class clock_policy : public eviction_policy {
  public:
    explicit clock_policy(uint32_t capacity) : _res(capacity), _ref(capacity, false) {}
    void stored(uint32_t s) noexcept override {
        if (_res.add(s))
            _count++;
        if (_res.has(s))
            _ref[s] = true;
    }
    void accessed(uint32_t s) noexcept override {
        if (_res.has(s))
            _ref[s] = true;
    }
    void removed(uint32_t s) noexcept override {
        if (_res.drop(s))
            _count--;
    }
    std::optional<uint32_t> victim() noexcept override {
        if (_count == 0)
            return std::nullopt;
        const auto n = uint32_t(_ref.size());
        for (;;) { // ends within two sweeps: the first clears every bit
            const uint32_t s = _hand;
            _hand = (_hand + 1) % n;
            if (!_res.has(s))
                continue;
            if (_ref[s]) {
                _ref[s] = false;
                continue;
            }
            removed(s);
            return s;
        }
    }
    std::string_view name() const noexcept override { return "clock"; }

  private:
    residency _res;
    std::vector<bool> _ref;
    uint32_t _hand = 0;
    uint32_t _count = 0;
};

class random_policy : public eviction_policy {
  public:
    random_policy(uint32_t capacity, uint64_t seed) : _pos(capacity, nil), _rng(seed) {
        _slots.reserve(capacity);
    }
    void stored(uint32_t s) noexcept override {
        if (s >= _pos.size() || _pos[s] != nil)
            return;
        _pos[s] = uint32_t(_slots.size());
        _slots.push_back(s);
    }
    void accessed(uint32_t) noexcept override {}
    void removed(uint32_t s) noexcept override {
        if (s >= _pos.size() || _pos[s] == nil)
            return;
        const uint32_t at = _pos[s], last = _slots.back();
        _slots[at] = last;
        _pos[last] = at;
        _slots.pop_back();
        _pos[s] = nil;
    }
    std::optional<uint32_t> victim() noexcept override {
        if (_slots.empty())
            return std::nullopt;
        const uint32_t s = _slots[_rng() % _slots.size()];
        removed(s);
        return s;
    }
    std::string_view name() const noexcept override { return "random"; }

  private:
    std::vector<uint32_t> _slots;
    std::vector<uint32_t> _pos;
    std::mt19937_64 _rng;
};

} // namespace

std::unique_ptr<eviction_policy> make_eviction_policy(std::string_view name, uint32_t capacity,
                                                      uint64_t seed) {
    if (capacity == 0)
        throw error("an eviction policy needs a capacity of at least one page");
    if (name == "fifo")
        return std::make_unique<list_policy>(capacity, false, "fifo");
    if (name == "lru")
        return std::make_unique<list_policy>(capacity, true, "lru");
    if (name == "lfu")
        return std::make_unique<lfu_policy>(capacity);
    if (name == "clock")
        return std::make_unique<clock_policy>(capacity);
    if (name == "random")
        return std::make_unique<random_policy>(capacity, seed);
    throw error(fmt::format("unknown eviction policy '{}' (fifo, lru, lfu, clock, random)", name));
}

} // namespace ferry::pagesrv
