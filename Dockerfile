# Placeholder: the server's container image (multi-stage build, non-root user, healthcheck) comes
# with the hardened-deploy work, once there is a server to package. Today file-agent is a CLI:
# build it with `cargo build --release`. The sandbox image, which is real, is
# sandbox-image/Dockerfile (or `file-agent image build`).
