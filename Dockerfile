# syntax=docker/dockerfile:1
# Lockstep service image.
#   docker build -t lockstep .
#   docker run -p 7070:7070 -v lockstep-data:/data lockstep
# docker-compose.yml runs it with Postgres and Redis.

# --- build ------------------------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so a source change does not re-download modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Pure Go (SQLite is modernc.org/sqlite): a static binary runs on any base.
# Three builds: lockstep (the client, which starts in about a millisecond),
# lockstep-server beside it (the server build, which `lockstep serve` runs)
# and lockstep-egress (`lockstep run`'s egress proxy, cmd/lockstep-egress). .git stays out of the context, so `lockstep version` learns the commit
# from --build-arg REVISION=$(git rev-parse HEAD).
ARG REVISION=""
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.revision=${REVISION}" -o /out/lockstep ./cmd/lockstep \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/lockstep-egress ./cmd/lockstep-egress \
 && CGO_ENABLED=0 go build -trimpath -tags lockstep_server -ldflags="-s -w -X main.revision=${REVISION}" -o /out/lockstep-server ./cmd/lockstep

# --- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim
# git: the service runs `git upload-pack` (fetch, clone) and `git repack` (pack compaction).
# ca-certificates: TLS to Postgres, Redis and gate webhooks.
# curl: the HEALTHCHECK below.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/lockstep lockstep \
 && mkdir -p /data \
 && chown lockstep:lockstep /data
COPY --from=build /out/lockstep /out/lockstep-egress /out/lockstep-server /usr/local/bin/
USER lockstep
ENV HOME=/home/lockstep
WORKDIR /data
# Declared after the chown so a fresh named volume inherits the ownership.
VOLUME /data
EXPOSE 7070
# Matches the port of the default CMD; change both together.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD curl -fsS http://127.0.0.1:7070/healthz || exit 1
ENTRYPOINT ["lockstep"]
CMD ["serve", "--addr", "0.0.0.0:7070", "--data", "/data"]
