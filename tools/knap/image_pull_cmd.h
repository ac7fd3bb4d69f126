// `knap image pull IMAGE`: pulls an image from its registry into containerd
// directly (as root, like `knap image import`), with knapd's registry
// settings read from its config file. Single-threaded caller; the progress
// display is fed from the puller's worker threads under a lock.
#pragma once

#include <string>
#include <vector>

namespace knap::cli {

// knap image pull IMAGE [--config FILE] [--platform os/arch] [--containerd-socket PATH] [--namespace NS]
// Exit 0 with one stdout line `pulled IMAGE -> DIGEST_REF (N bytes fetched)`;
// exit 1 with `error: pull IMAGE: <Reason>: <message>` on stderr; 2 on usage
// errors. Progress goes to stderr: a bar on a TTY, one line per phase otherwise.
int cmdImagePull(const std::vector<std::string>& args);

}  // namespace knap::cli
