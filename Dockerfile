# The slidelog CLI as a static binary on an empty image: nothing to pull.
# Build the binary first (scripts/compose-check.sh does):
#   scripts/build-cli.sh build/slidelog
#   docker build -t slidelog/slidelog:dev -f Dockerfile build
# The context holds no .git: the binary carries its commit (build-cli.sh
# names it with -ldflags -X), and `slidelog version` in the image says it.
FROM scratch
COPY slidelog /slidelog
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/slidelog"]
CMD ["serve", "--listen", ":8080"]
