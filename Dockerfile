# syntax=docker/dockerfile:1
#
# tollgate's container image, for those with Docker:
#
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) -t ghcr.io/tollgate/tollgate:0.1.0 .
#
# `make image` builds the same image without a daemon (hack/image); see
# docs/image.md. VERSION defaults to the chart's appVersion, the tag the
# chart deploys by default (a test in hack/image keeps them equal).
ARG VERSION=0.1.0
ARG COMMIT=unknown

# A static binary: no cgo, no paths of this machine, version stamped in.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
ARG COMMIT
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/tollgate ./cmd/tollgate

# distroless static, nonroot variant: no shell or package manager; the
# nonroot user (65532, the chart's runAsUser), CA certificates, time zones.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG COMMIT
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Envoy ext_proc admission scheduler for LLM inference" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/tollgate/tollgate"
COPY --from=build /out/tollgate /tollgate
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/tollgate"]
# With no args the container serves; the chart's args (serve and its flags) replace CMD.
CMD ["serve"]
