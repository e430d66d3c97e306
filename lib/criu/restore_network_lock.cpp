#include "criu/restore_network_lock.hpp"

#include "criu/criu_image.hpp"
#include "criu_images.pb-c.h"
#include "rpc.pb-c.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

namespace ferry::criu {

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
    uint8_t b[4];
    std::memcpy(b, &v, 4); // CRIU's images are host-endian
    out.insert(out.end(), b, b + 4);
}

} // namespace

void skip_restore_network_lock(const std::filesystem::path& images_dir) {
    const auto path = images_dir / "inventory.img";
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> file{std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>()};
    if (!in.eof() && !in)
        throw image_error(fmt::format("cannot read {}", path.string()));
    const auto entries = split_entries(file, inventory_magic, "inventory.img");
    if (entries.size() != 1)
        throw image_error(
            fmt::format("inventory.img: expected one entry, found {}", entries.size()));
    // protobuf-c keeps the fields its schema lacks and packs them back.
    std::unique_ptr<CriuImage__InventoryEntry, void (*)(CriuImage__InventoryEntry*)> entry(
        criu_image__inventory_entry__unpack(nullptr, entries[0].size(), entries[0].data()),
        [](CriuImage__InventoryEntry* e) {
            criu_image__inventory_entry__free_unpacked(e, nullptr);
        });
    if (!entry)
        throw image_error("inventory.img: its entry does not decode");
    entry->has_network_lock_method = true;
    entry->network_lock_method = CRIU_NETWORK_LOCK_METHOD__SKIP;
    std::vector<uint8_t> packed(criu_image__inventory_entry__get_packed_size(entry.get()));
    criu_image__inventory_entry__pack(entry.get(), packed.data());
    std::vector<uint8_t> out;
    put_u32(out, inventory_magic);
    put_u32(out, uint32_t(packed.size()));
    out.insert(out.end(), packed.begin(), packed.end());
    const auto temp = images_dir / "inventory.img.ferry";
    {
        std::ofstream o(temp, std::ios::binary | std::ios::trunc);
        o.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size()));
        if (!o)
            throw image_error(fmt::format("cannot write {}", temp.string()));
    }
    std::filesystem::rename(temp, path);
}

} // namespace ferry::criu
