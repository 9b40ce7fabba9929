# The image `secure-orca deploy` names by default (--image secure-orca:dev), built from this directory:
#   docker build -t secure-orca:dev .        (podman and buildah read this file too)
# First stage: the package and every dependency as wheels. Second stage: those wheels installed into a slim
# Python, run as the manifests' non-root uid and gid (65532), with the `secure-orca` command as entry point (the
# manifests' args start with `serve`). Nothing else is copied: .dockerignore admits only the package's sources,
# never certs/ (keys) or a virtual environment.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY secure_orca ./secure_orca
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# libnghttp2 decodes a client's long Huffman-coded headers at C speed (secure_orca/server/nghttp2.py). Not pinned:
# the archive replaces a version with each security update, and a pin would then fail the build.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends libnghttp2-14 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
# The root filesystem is read-only in the manifests: no bytecode cache to write; logs unbuffered.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["secure-orca"]
CMD ["--help"]
