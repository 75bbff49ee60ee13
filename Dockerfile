# The slidelog CLI as a static binary on an empty image: nothing to pull.
# scripts/build-image.sh builds both targets from a context it prepares
# (the binary, and bin/ratelimit, a symbolic link to it):
#   slidelog/slidelog:dev      (target serve, the default) runs `serve`
#   slidelog/slidelog:dev-rls  (target rls) runs the Envoy rate limit
#                              service, set by envoyproxy/ratelimit's
#                              environment variables (docs/envoy.md)
# Both hold the same files, so either answers to Istio's and Envoy
# Gateway's `command: ["/bin/ratelimit"]`: the binary run under that name
# is `slidelog rls --ratelimit-env`. The time zones of calendar limits are
# in the binary (time/tzdata); there is no /usr/share/zoneinfo here.
# The context holds no .git: the binary carries its commit (build-cli.sh
# names it with -ldflags -X), and `slidelog version` in the image says it.

FROM scratch AS rls
COPY slidelog /slidelog
COPY bin/ /bin/
USER 65534:65534
# envoyproxy/ratelimit's ports: HTTP (/healthcheck, /json, /rlconfig,
# /metrics), gRPC, debug (/rlconfig, /debug/pprof/)
EXPOSE 8080 8081 6070
# GET /healthcheck on HOST:PORT (127.0.0.1:8080 by default): the image has
# no curl. Kubernetes ignores it; give the Deployment an httpGet probe.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/slidelog", "healthcheck"]
ENTRYPOINT ["/bin/ratelimit"]

FROM scratch AS serve
COPY slidelog /slidelog
COPY bin/ /bin/
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/slidelog"]
CMD ["serve", "--listen", ":8080"]
