#include "console/assets.h"

namespace knap::console {

// Defined by the generated assets_data.cc (console/embed.py).
extern const Asset kAssets[];
extern const size_t kAssetCount;
extern const char kBundleId[];

const Asset* findAsset(std::string_view name) {
  for (size_t i = 0; i < kAssetCount; ++i)
    if (kAssets[i].name == name) return &kAssets[i];
  return nullptr;
}

std::string_view bundleId() {
  return kBundleId;
}
const Asset* assetsBegin() {
  return kAssets;
}
const Asset* assetsEnd() {
  return kAssets + kAssetCount;
}

}  // namespace knap::console
