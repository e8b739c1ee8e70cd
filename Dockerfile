# The file-agent server's image: a static-ish Rust binary on a slim Debian, as a non-root user,
# with a health check. The sandbox image every attempt runs in is separate:
# sandbox-image/Dockerfile (compose.yaml builds both).
#
# Hosts with a registry:   docker build -t file-agent .
# Without one (this project's machines), deploy/check.sh builds it from a locally made base and
# a binary built on the host: the build arguments below name other images for each stage.
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
ARG BINARY_FROM=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY prompts prompts
COPY sandbox-image sandbox-image
RUN cargo build --release --locked && cp target/release/file-agent /file-agent && strip /file-agent

# The stage the binary is taken from: `build` above, or an image holding /file-agent.
FROM ${BINARY_FROM} AS binary

FROM ${RUNTIME_IMAGE} AS runtime
# CA certificates for HTTPS to the model API; nothing else is installed.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
    && echo "file-agent:x:10002:10002:file-agent server:/nonexistent:/usr/sbin/nologin" >> /etc/passwd \
    && echo "file-agent:x:10002:" >> /etc/group \
    && mkdir -p /data && chown 10002:10002 /data
COPY --from=binary /file-agent /usr/local/bin/file-agent
USER 10002:10002
WORKDIR /data
ENV FILE_AGENT_LISTEN=0.0.0.0:8000 FILE_AGENT_DATA_DIR=/data FILE_AGENT_LOG=warn,file_agent=info
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/file-agent", "health"]
ENTRYPOINT ["/usr/local/bin/file-agent"]
CMD ["serve"]
