#include "acme/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <thread>

#include "common/json_path.h"
#include "common/string_util.h"

namespace knap::acme {
namespace {

using nlohmann::json;

struct Transfer {
  HttpResponse* resp;
  size_t max_body;
  bool too_large = false;
};

size_t onHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) t->resp->headers.clear();  // a new response (after 100-continue)
  auto colon = line.find(':');
  if (colon != std::string::npos && t->resp->headers.size() < 100) {
    t->resp->headers[asciiLower(std::string(trimSpace(line.substr(0, colon))))] =
        std::string(trimSpace(line.substr(colon + 1)));
  }
  return size * n;
}

size_t onBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->resp->body.size() + size * n > t->max_body) {
    t->too_large = true;
    return 0;
  }
  t->resp->body.append(data, size * n);
  return size * n;
}

class CurlTransport : public Transport {
 public:
  explicit CurlTransport(CurlOptions options) : options_(std::move(options)) {}
  StatusOr<HttpResponse> request(const std::string& method, const std::string& url,
                                 const std::string& body) override {
    CURL* curl = curl_easy_init();
    if (curl == nullptr) return internalError("curl_easy_init failed");
    std::unique_ptr<CURL, void (*)(CURL*)> guard(curl, curl_easy_cleanup);
    HttpResponse resp;
    Transfer t{&resp, options_.max_body};
    char errbuf[CURL_ERROR_SIZE] = {0};
    struct curl_slist* hdrs = nullptr;
    if (method == "POST") hdrs = curl_slist_append(hdrs, "Content-Type: application/jose+json");
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> hguard(hdrs, curl_slist_free_all);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "knap-acme/1");
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!options_.ca_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
      curl_easy_setopt(curl, CURLOPT_CAPATH, "/etc/ssl/certs");
    }
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, onHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, onBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    if (method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    if (method == "POST") {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK) {
      if (t.too_large)
        return unavailable(url + ": response larger than " + std::to_string(options_.max_body) + " bytes");
      std::string text = curl_easy_strerror(rc);
      if (errbuf[0] != '\0') text += " (" + std::string(errbuf) + ")";
      return unavailable(url + ": " + text);
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
    return resp;
  }

 private:
  CurlOptions options_;
};

StatusOr<json> parseJson(const HttpResponse& r, const std::string& what) {
  json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return unavailable(what + ": the ACME server answered HTTP " + std::to_string(r.status) +
                       " with a body that is not a JSON object");
  }
  return body;
}

}  // namespace

std::unique_ptr<Transport> makeCurlTransport(const CurlOptions& options) {
  return std::make_unique<CurlTransport>(options);
}

std::string problemText(const json& body) {
  std::string type = stringAt(body, "type");
  std::string detail = stringAt(body, "detail");
  if (type.empty() && detail.empty()) return "";
  std::string text = type.empty() ? detail : (detail.empty() ? type : type + ": " + detail);
  if (text.size() > 1024) text.resize(1024);
  return text;
}

AcmeClient::AcmeClient(Transport& transport, AccountKey account, ClientOptions options)
    : transport_(transport), account_(std::move(account)), options_(std::move(options)) {}

bool AcmeClient::sleep(std::chrono::milliseconds d) const {
  if (options_.sleep) return options_.sleep(d);
  std::this_thread::sleep_for(d);
  return true;
}

Status AcmeClient::checkUrl(const std::string& url, const std::string& what) const {
  const bool plain_ok = options_.directory_url.rfind("http://", 0) == 0;
  if (url.rfind("https://", 0) == 0 || (plain_ok && url.rfind("http://", 0) == 0)) {
    if (url.size() <= 4096) return Status::ok();
  }
  return unavailable("ACME " + what + ": the server gave a URL that is not https:// (\"" +
                     url.substr(0, 200) + "\")");
}

Status AcmeClient::loadDirectory() {
  if (!directory_.empty()) return Status::ok();
  auto r = transport_.request("GET", options_.directory_url, "");
  if (!r.isOk()) return unavailable("ACME directory: " + r.status().message());
  if (r->status != 200) {
    return unavailable("ACME directory " + options_.directory_url + ": HTTP " + std::to_string(r->status));
  }
  auto body = parseJson(*r, "ACME directory");
  if (!body.isOk()) return body.status();
  std::map<std::string, std::string> dir;
  for (const char* k : {"newNonce", "newAccount", "newOrder"}) {
    std::string url = stringAt(*body, k);
    if (url.empty()) return unavailable("ACME directory " + options_.directory_url + " has no " + k + " URL");
    KNAP_RETURN_IF_ERROR(checkUrl(url, std::string("directory ") + k));
    dir[k] = url;
  }
  directory_ = std::move(dir);
  return Status::ok();
}

Status AcmeClient::newNonce() {
  auto r = transport_.request("HEAD", directory_["newNonce"], "");
  if (!r.isOk()) return unavailable("ACME newNonce: " + r.status().message());
  auto it = r->headers.find("replay-nonce");
  if (it == r->headers.end() || it->second.empty() || it->second.size() > 512) {
    return unavailable("ACME newNonce: HTTP " + std::to_string(r->status) + " without a Replay-Nonce");
  }
  nonce_ = it->second;
  return Status::ok();
}

StatusOr<HttpResponse> AcmeClient::post(const std::string& url, const std::optional<json>& payload,
                                        bool use_jwk) {
  for (int attempt = 0;; ++attempt) {
    if (nonce_.empty()) KNAP_RETURN_IF_ERROR(newNonce());
    auto req = signRequest(account_, url, nonce_, use_jwk ? "" : account_url_, payload);
    if (!req.isOk()) return req.status();
    nonce_.clear();
    auto r = transport_.request("POST", url, req->dump());
    if (!r.isOk()) return r.status();
    if (auto it = r->headers.find("replay-nonce"); it != r->headers.end() && it->second.size() <= 512) {
      nonce_ = it->second;
    }
    if (r->status == 400 && attempt < options_.max_bad_nonce_retries) {
      json body = json::parse(r->body, nullptr, false);
      if (stringAt(body, "type") == "urn:ietf:params:acme:error:badNonce") continue;
    }
    return r;
  }
}

StatusOr<json> AcmeClient::postJson(const std::string& url, const std::optional<json>& payload,
                                    const std::string& what, std::string* location) {
  KNAP_RETURN_IF_ERROR(checkUrl(url, what));
  auto r = post(url, payload, what == "newAccount");
  if (!r.isOk()) return unavailable("ACME " + what + ": " + r.status().message());
  json body = json::parse(r->body, nullptr, false);
  if (r->status < 200 || r->status > 299) {
    std::string problem = body.is_discarded() ? "" : problemText(body);
    return failedPrecondition("ACME " + what + ": HTTP " + std::to_string(r->status) +
                              (problem.empty() ? "" : " " + problem));
  }
  if (body.is_discarded() || !body.is_object()) {
    return unavailable("ACME " + what + ": HTTP " + std::to_string(r->status) +
                       " with a body that is not a JSON object");
  }
  if (location != nullptr) {
    auto it = r->headers.find("location");
    if (it == r->headers.end()) return unavailable("ACME " + what + ": no Location header");
    KNAP_RETURN_IF_ERROR(checkUrl(it->second, what + " Location"));
    *location = it->second;
  }
  return body;
}

Status AcmeClient::ensureAccount() {
  KNAP_RETURN_IF_ERROR(loadDirectory());
  if (!account_url_.empty()) return Status::ok();
  json payload = {{"termsOfServiceAgreed", true}};
  if (!options_.email.empty()) payload["contact"] = json::array({"mailto:" + options_.email});
  std::string location;
  auto body = postJson(directory_["newAccount"], payload, "newAccount", &location);
  if (!body.isOk()) return body.status();
  if (stringAt(*body, "status") != "valid") {
    return failedPrecondition("ACME newAccount: account status is \"" +
                              stringAt(*body, "status").substr(0, 64) + "\"");
  }
  account_url_ = location;
  return Status::ok();
}

StatusOr<json> AcmeClient::poll(const std::string& url, const std::string& what,
                                std::initializer_list<const char*> pending_states) {
  auto delay = options_.poll_delay;
  auto waited = std::chrono::milliseconds(0);
  for (;;) {
    auto body = postJson(url, std::nullopt, what);
    if (!body.isOk()) return body.status();
    const std::string status = stringAt(*body, "status");
    bool pending =
        std::any_of(pending_states.begin(), pending_states.end(), [&](const char* s) { return status == s; });
    if (!pending) return body;
    if (waited >= options_.poll_deadline) {
      return unavailable("ACME " + what + " still \"" + status + "\" after " +
                         std::to_string(waited.count() / 1000) + " s");
    }
    if (!sleep(delay)) return unavailable("ACME " + what + ": stopping");
    waited += delay;
    delay = std::min(delay * 2, options_.max_poll_delay);
  }
}

StatusOr<Issued> AcmeClient::issue(const std::string& host, const ChallengePublisher& publish) {
  KNAP_RETURN_IF_ERROR(ensureAccount());
  // 1. The order.
  json id = {{"type", "dns"}, {"value", host}};
  std::string order_url;
  auto order =
      postJson(directory_["newOrder"], json{{"identifiers", json::array({id})}}, "newOrder", &order_url);
  if (!order.isOk()) return order.status();
  std::string finalize = stringAt(*order, "finalize");
  auto authzs = order->value("authorizations", json());
  if (finalize.empty() || !authzs.is_array() || authzs.empty() || authzs.size() > 10) {
    return unavailable("ACME newOrder: the order has no finalize URL or no authorizations");
  }
  // 2. Each authorization's http-01 challenge.
  for (const json& a : authzs) {
    if (!a.is_string()) return unavailable("ACME newOrder: an authorization URL is not a string");
    const std::string authz_url = a.get<std::string>();
    auto authz = postJson(authz_url, std::nullopt, "authorization");
    if (!authz.isOk()) return authz.status();
    if (stringAt(*authz, "status") == "valid") continue;
    std::string chall_url, token;
    auto challenges = authz->value("challenges", json());
    if (challenges.is_array()) {
      for (const json& c : challenges) {
        if (stringAt(c, "type") == "http-01") {
          chall_url = stringAt(c, "url");
          token = stringAt(c, "token");
        }
      }
    }
    if (chall_url.empty())
      return failedPrecondition("ACME authorization for " + host + ": no http-01 challenge offered");
    if (token.empty() || token.size() > 256 || !std::all_of(token.begin(), token.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        })) {
      return unavailable("ACME authorization for " + host + ": the http-01 token is not base64url");
    }
    publish(token, keyAuthorization(token, account_));
    auto responded = postJson(chall_url, json::object(), "challenge");
    StatusOr<json> done = responded.isOk() ? poll(authz_url, "authorization", {"pending", "processing"})
                                           : StatusOr<json>(responded.status());
    publish(token, "");
    if (!done.isOk()) return done.status();
    if (stringAt(*done, "status") != "valid") {
      std::string why;
      if (challenges = done->value("challenges", json()); challenges.is_array()) {
        for (const json& c : challenges) {
          if (c.is_object() && c.contains("error")) why = problemText(c["error"]);
        }
      }
      return failedPrecondition("ACME authorization for " + host + " is \"" +
                                stringAt(*done, "status").substr(0, 32) + "\"" +
                                (why.empty() ? "" : ": " + why));
    }
  }
  // 3. Finalize with a CSR for a new key, then wait for the certificate.
  auto cert_key = AccountKey::generate();
  if (!cert_key.isOk()) return cert_key.status();
  auto csr = makeCsr(*cert_key, {host});
  if (!csr.isOk()) return csr.status();
  auto fin = postJson(finalize, json{{"csr", *csr}}, "finalize");
  if (!fin.isOk()) return fin.status();
  auto final_order = poll(order_url, "order", {"pending", "ready", "processing"});
  if (!final_order.isOk()) return final_order.status();
  if (stringAt(*final_order, "status") != "valid") {
    std::string why = final_order->contains("error") ? problemText((*final_order)["error"]) : "";
    return failedPrecondition("ACME order for " + host + " is \"" +
                              stringAt(*final_order, "status").substr(0, 32) + "\"" +
                              (why.empty() ? "" : ": " + why));
  }
  const std::string cert_url = stringAt(*final_order, "certificate");
  KNAP_RETURN_IF_ERROR(checkUrl(cert_url, "certificate"));
  auto cert = post(cert_url, std::nullopt);
  if (!cert.isOk()) return unavailable("ACME certificate download: " + cert.status().message());
  if (cert->status != 200 || cert->body.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return unavailable("ACME certificate download: HTTP " + std::to_string(cert->status) +
                       " without a PEM chain");
  }
  return Issued{cert->body, cert_key->pem()};
}

}  // namespace knap::acme
