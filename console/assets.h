// The web console's files (issue 13), embedded into knapd at build time.
//
// console/embed.py turns the sources in console/ (HTML, CSS, JavaScript
// modules) into a generated assets_data.cc (meson custom_target); nothing is
// read from disk or the network at run time. The API server serves them under
// /ui/ (api/server/console_handler.h): index.html at /ui/ (revalidated every
// time), every other file at /ui/<bundleId>/<name>, where the bundle id is a
// digest of all files, so those URLs never change content and are cached as
// immutable. index.html refers to the bundle through the id, which embed.py
// writes into it.
//
// Everything here is constant data; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace knap::console {

struct Asset {
  std::string_view name;          // "index.html", "app.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
  std::string_view etag;  // quoted strong validator: "\"<sha256 prefix>\""
};

// The asset called `name`, or nullptr.
const Asset* findAsset(std::string_view name);
// The digest of every asset (hex), the path segment of the immutable URLs.
std::string_view bundleId();
// Every asset, for listing in tests.
const Asset* assetsBegin();
const Asset* assetsEnd();

}  // namespace knap::console
