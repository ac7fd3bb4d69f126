#include "tests/fuzz/fuzz_targets.h"

#include <string>

#include <nlohmann/json.hpp>

#include "api/admission.h"
#include "api/codec.h"
#include "api/quantity.h"
#include "api/server/patch.h"

namespace knap::fuzz {
namespace {

using nlohmann::json;

std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

const Config& defaultConfig() {
  static const Config config;
  return config;
}

}  // namespace

int yamlDecode(const uint8_t* data, size_t size) {
  std::string in = text(data, size);
  auto docs = api::parseYamlDocuments(in);
  if (docs.isOk()) {
    // What knap get -o yaml prints is decoded again (the emitter on any decoded value).
    for (const json& doc : *docs) (void)api::parseYamlDocuments(api::toYaml(doc));
  }
  (void)api::parseDocument(in, true);
  return 0;
}

int jsonDecode(const uint8_t* data, size_t size) {
  auto doc = api::parseJson(text(data, size));
  if (doc.isOk()) {
    (void)api::checkDocumentSize(*doc);
    (void)api::toYaml(*doc);
  }
  return 0;
}

int admission(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto doc = api::parseDocument(text(data + 1, size - 1), data[0] & 1);
  if (!doc.isOk() || !doc->is_object()) return 0;
  static const char* kKinds[] = {"Service", "Configuration", "Route", "Revision"};
  const char* kind = kKinds[(data[0] >> 1) % 4];
  json obj = *doc;
  (void)api::unknownFields(kind, obj);
  api::setDefaults(kind, obj, defaultConfig());
  json again = obj;
  api::setDefaults(kind, again, defaultConfig());
  (void)api::validate(kind, obj, nullptr, api::Operation::kCreate, defaultConfig());
  (void)api::validate(kind, obj, &again, api::Operation::kUpdate, defaultConfig());
  (void)api::parseQuantity(*doc);
  return 0;
}

int patching(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  bool yaml_patch = data[0] & 1;
  std::string in = text(data + 1, size - 1);
  size_t split = in.find('\0');
  if (split == std::string::npos) return 0;
  auto doc = api::parseJson(in.substr(0, split));
  auto patch = api::parseDocument(in.substr(split + 1), yaml_patch);
  if (!doc.isOk() || !patch.isOk()) return 0;
  auto patched = api::applyJsonPatch(*doc, *patch);
  if (patched.isOk()) (void)api::checkDocumentSize(*patched);
  if (patch->is_object()) {
    json merged = *doc;
    merged.merge_patch(*patch);
    (void)api::checkDocumentSize(merged);
  }
  return 0;
}

}  // namespace knap::fuzz
