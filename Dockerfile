# The slidelog CLI as a static binary on an empty image: nothing to pull.
# Build the binary first (scripts/compose-check.sh does):
#   CGO_ENABLED=0 go build -trimpath -o build/slidelog ./cmd/slidelog
#   docker build -t slidelog/slidelog:dev -f Dockerfile build
FROM scratch
COPY slidelog /slidelog
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/slidelog"]
CMD ["serve", "--listen", ":8080"]
