# tokengate's container image: a static binary on distroless, as non-root.
#
#   docker build -t tokengate:dev --build-arg VERSION="$(git describe --tags --always)" .
#   docker run --rm -p 8081:8081 -p 8080:8080 tokengate:dev
#   docker run --rm --entrypoint /bin/ratelimit -e RUNTIME_SUBDIRECTORY=ratelimit ... tokengate:dev
#
# The runtime image has no shell and no curl, so there is no HEALTHCHECK
# here: probe tokengate from outside, through gRPC health (grpc.health.v1 on
# :8081, e.g. Kubernetes' native grpc probe or grpc-health-probe) or HTTP
# GET /healthz (alive) and /readyz (ready) on :8080. The Helm chart in
# charts/tokengate does exactly that.

# Build on the builder's own platform and cross-compile for the target one
# (docker buildx build --platform linux/amd64,linux/arm64 ...).
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -tags vtprotobuf -ldflags "-s -w -X main.version=${VERSION}" -o /out/tokengate ./cmd/tokengate
# /bin/ratelimit, a link to /tokengate: invoked by that name tokengate is
# envoyproxy/ratelimit's process, configured by its environment variables
# (docs/reference-format.md, "Migrating from envoyproxy/ratelimit"); Envoy
# Gateway runs it so.
# The runtime image has no shell to make the link: it is made here and
# copied as a directory, which keeps links as links.
RUN mkdir -p /out/bin && ln -s /tokengate /out/bin/ratelimit

# distroless/static: CA certificates, tzdata and /etc/passwd, nothing else.
# Its nonroot user is 65532:65532, the user the Helm chart runs as.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tokengate /tokengate
COPY --from=build /out/bin /bin
USER 65532:65532
# 8081: gRPC (envoy.service.ratelimit.v3, grpc.health.v1, reflection)
# 8080: HTTP (/metrics, /healthz, /readyz, /debug/policy, /healthcheck, /json)
# (as /bin/ratelimit, 6070 too: /rlconfig, pprof)
EXPOSE 8081 8080
ENTRYPOINT ["/tokengate"]
CMD ["serve"]
