# Multi-stage build: the same `go build` as `make build`, a static binary on a
# distroless non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY main.go ./
COPY api/ api/
COPY channels/ channels/
COPY controllers/ controllers/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/simplewebapp-operator .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/simplewebapp-operator /simplewebapp-operator
USER 65532:65532
ENTRYPOINT ["/simplewebapp-operator"]
