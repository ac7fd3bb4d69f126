#!/usr/bin/env python3
"""Generates C++ for the containerd protos knap uses.

protoc's C++ generator aborts on `import weak`, so each .proto is first copied
into a private tree under the build directory with `import weak` rewritten to a
plain `import` (MACHINE-NOTES.md). Then protoc + grpc_cpp_plugin run over the
copies. Generated headers stay in the nested tree (they include each other by
path); every generated .cc is also copied to a flat output name because meson
outputs cannot contain directories.

usage: gen_protos.py PROTOC GRPC_PLUGIN GEN_DIR OUT_DIR SPEC...
  SPEC = SRC_FILE=IMPORT_PATH[=grpc]   (IMPORT_PATH is how others import it)
"""
import os
import re
import shutil
import subprocess
import sys


def flat_name(import_path):
    prefix = "github.com/containerd/containerd/"
    if import_path.startswith(prefix):
        import_path = import_path[len(prefix):]
    return import_path.replace("/", "_").replace(".proto", "")


def main():
    protoc, plugin, gen_dir, out_dir = sys.argv[1:5]
    specs = [s.split("=") for s in sys.argv[5:]]
    src_dir = os.path.join(gen_dir, "proto")
    cpp_dir = os.path.join(gen_dir, "cpp")
    for d in (src_dir, cpp_dir):
        os.makedirs(d, exist_ok=True)
    weak = re.compile(r"^import\s+weak\s+", re.M)
    for spec in specs:
        src, imp = spec[0], spec[1]
        with open(src, encoding="utf-8") as f:
            text = weak.sub("import ", f.read())
        dst = os.path.join(src_dir, imp)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(dst + ".tmp", dst)
    plain = [s[1] for s in specs]
    grpc = [s[1] for s in specs if len(s) > 2 and s[2] == "grpc"]
    base = ["-I" + src_dir, "-I/usr/include"]
    subprocess.check_call([protoc] + base + ["--cpp_out=" + cpp_dir] + plain)
    if grpc:
        subprocess.check_call([protoc] + base + ["--grpc_out=" + cpp_dir,
                               "--plugin=protoc-gen-grpc=" + plugin] + grpc)
    for imp in plain:
        stem = imp[: -len(".proto")]
        shutil.copyfile(os.path.join(cpp_dir, stem + ".pb.cc"),
                        os.path.join(out_dir, flat_name(imp) + ".pb.cc"))
    for imp in grpc:
        stem = imp[: -len(".proto")]
        shutil.copyfile(os.path.join(cpp_dir, stem + ".grpc.pb.cc"),
                        os.path.join(out_dir, flat_name(imp) + ".grpc.pb.cc"))
    # A stamp listing the headers, so dependents wait for generation.
    with open(os.path.join(out_dir, "containerd_protos.stamp.h"), "w") as f:
        f.write("// generated: containerd protos are in %s\n" % cpp_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
