// frames_of_memory.h - which frames made each storage a backward's ops
// wrote, as the op observer (observer.cpp) hands a backward's ops over: an
// engine op lent no frames of its own (AccumulateGrad's, which no forward
// op made) is recorded under the frames of the op that made its memory.
// No Python here, and nothing of the observer's state.
//
// Included by observer.cpp alone: the observer is one translation unit,
// built at first use against the torch in use (held_args.h says why).
#ifndef VT_TRACKOBS_FRAMES_OF_MEMORY_H
#define VT_TRACKOBS_FRAMES_OF_MEMORY_H

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trackobs {

// The frames each storage's latest maker was lent (hand_over_ops): the
// few dozen of a backward in a list scanned from the newest (a map cost a
// heap block per entry, a microsecond and a half a step of a small
// model), a long backward's in a map once the list passes LIST_MAX.
class FramesOfMemory {
public:
    void note(uintptr_t storage, uint32_t frames)
    {
        if (!map_.empty() || list_.size() >= LIST_MAX) {
            for (const auto &made : list_)
                map_[made.first] = made.second;
            list_.clear();
            map_[storage] = frames;
            return;
        }
        list_.emplace_back(storage, frames);
    }
    // 0: none noted
    uint32_t of(uintptr_t storage) const
    {
        if (!map_.empty()) {
            auto it = map_.find(storage);
            return it != map_.end() ? it->second : 0;
        }
        for (auto it = list_.rbegin(); it != list_.rend(); ++it)
            if (it->first == storage)
                return it->second;
        return 0;
    }

private:
    static constexpr size_t LIST_MAX = 256;
    std::vector<std::pair<uintptr_t, uint32_t>> list_;
    std::unordered_map<uintptr_t, uint32_t> map_;
};

}  // namespace trackobs

#endif
