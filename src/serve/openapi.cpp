// The OpenAPI 3.0 document of /api/v1, served at /api/v1/openapi.json. Kept beside the routes
// (api.cpp); the tests check that every route answers as documented.
#include <string>

#include "serve/api.h"

namespace ddpx::serve {

const std::string& openapi_json() {
  static const std::string kDocument = R"json({
  "openapi": "3.0.3",
  "info": {"title": "ddpx job service", "version": "1",
           "description": "Training jobs on a shared node: devices and ports allocated by the service, a first-come-first-served queue, logs, metrics, snapshots and backups."},
  "servers": [{"url": "/"}],
  "components": {
    "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
      "JobRequest": {"type": "object", "required": ["command"], "additionalProperties": false,
        "properties": {
          "command": {"type": "array", "minItems": 1, "items": {"type": "string"},
                      "description": "What `ddpx run N --` runs: a ddpx subcommand (train ...) or a program"},
          "workers": {"type": "integer", "minimum": 1, "default": 1},
          "nodes": {"type": "integer", "minimum": 1, "default": 1,
                    "description": "With --scheduler slurm: the nodes the workers spread over, evenly; else 1"},
          "ports": {"type": "integer", "minimum": 0, "maximum": 8, "default": 0,
                    "description": "Extra ports for the job's own services, bound to 127.0.0.1 (DDPX_JOB_PORTS)"}}},
      "Job": {"type": "object", "properties": {
          "id": {"type": "integer"}, "user": {"type": "string"},
          "state": {"type": "string", "enum": ["queued", "running", "stopping", "ended"]},
          "command": {"type": "array", "items": {"type": "string"}},
          "workers": {"type": "integer"}, "nodes": {"type": "integer"},
          "devices": {"type": "array", "items": {"type": "integer"}},
          "ports": {"type": "array", "items": {"type": "integer"}},
          "exit_code": {"type": "integer", "nullable": true},
          "submitted": {"type": "integer"}, "started": {"type": "integer"}, "ended": {"type": "integer"},
          "slurm": {"type": "object", "nullable": true,
                    "description": "With `ddpx serve --scheduler slurm`: the Slurm job and its state as Slurm last reported it",
                    "properties": {"id": {"type": "string"}, "state": {"type": "string"}}}}},
      "Checkpoint": {"type": "object", "properties": {
          "name": {"type": "string"}, "kind": {"type": "string", "enum": ["epoch", "snapshot"]},
          "epoch": {"type": "integer"}, "step": {"type": "integer"},
          "bytes": {"type": "integer"}, "created": {"type": "integer"},
          "format": {"type": "string", "enum": ["whole", "parts"],
                     "description": "parts: a folder of each rank's part and an index (--shard on 2+ ranks, --pipeline_parallel)"}}}
    },
    "responses": {
      "Error": {"description": "The request was refused", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Job": {"description": "A job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}
    },
    "parameters": {
      "id": {"name": "id", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1}}
    }
  },
  "security": [{"token": []}],
  "paths": {
    "/api/v1/health": {"get": {"security": [], "summary": "Liveness and slot count",
      "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    "/api/v1/openapi.json": {"get": {"security": [], "summary": "This document",
      "responses": {"200": {"description": "The OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    "/api/v1/host": {"get": {"summary": "The host's CPU, memory and GPUs",
      "responses": {"200": {"description": "Host figures", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "401": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs": {
      "get": {"summary": "This user's jobs (an admin's: every job)",
        "responses": {"200": {"description": "Jobs", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}}}},
                      "401": {"$ref": "#/components/responses/Error"}}},
      "post": {"summary": "Submit a job; it runs when its devices are free",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobRequest"}}}},
        "responses": {"201": {"$ref": "#/components/responses/Job"},
                      "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"},
                      "413": {"description": "The body is over 1 MiB"},
                      "415": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}": {
      "get": {"summary": "One job", "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}},
      "delete": {"summary": "Forget an ended job", "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"description": "Deleted", "content": {"application/json": {"schema": {"type": "object"}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/stop": {
      "post": {"summary": "Stop a queued or running job", "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/restart": {
      "post": {"summary": "Queue an ended job again", "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
                      "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/logs": {
      "get": {"summary": "A rank's log, whole or followed while the job runs (chunked text; Server-Sent Events with Accept: text/event-stream)",
        "parameters": [{"$ref": "#/components/parameters/id"},
                       {"name": "rank", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 0}},
                       {"name": "follow", "in": "query", "schema": {"type": "boolean", "default": false}}],
        "responses": {"200": {"description": "The log", "content": {"text/plain": {"schema": {"type": "string"}}, "text/event-stream": {"schema": {"type": "string"}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/metrics": {
      "get": {"summary": "The job's per-epoch metrics (loss, accuracies, time, images/s) from rank 0's log",
        "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"description": "Epochs so far", "content": {"application/json": {"schema": {"type": "object"}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/snapshots": {
      "get": {"summary": "The job's checkpoints: per-epoch ones and snapshots, newest first",
        "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"200": {"description": "Checkpoints", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Checkpoint"}}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}}},
      "post": {"summary": "Take a snapshot: the running train job writes a checkpoint at its next step and goes on",
        "parameters": [{"$ref": "#/components/parameters/id"}],
        "responses": {"202": {"description": "Asked for", "content": {"application/json": {"schema": {"type": "object"}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/snapshots/{name}/restore": {
      "post": {"summary": "A new job, the same request, resuming from this checkpoint",
        "parameters": [{"$ref": "#/components/parameters/id"},
                       {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"201": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/jobs/{id}/backup": {
      "get": {"summary": "The job as one .tar.gz: manifest.json (its request, every file's size and SHA-256), checkpoints, logs, metrics",
        "parameters": [{"$ref": "#/components/parameters/id"},
                       {"name": "snapshots", "in": "query", "schema": {"type": "string", "default": "latest"},
                        "description": "latest, all, none, or NAME,NAME"}],
        "responses": {"200": {"description": "The backup", "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}},
                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                      "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/v1/backups": {
      "post": {"summary": "Import a backup: a new job of this user that resumes from its newest checkpoint",
        "requestBody": {"required": true, "description": "The .tar.gz of GET /api/v1/jobs/{id}/backup (any Content-Type)", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {"201": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
                      "401": {"$ref": "#/components/responses/Error"}}}},
    "/metrics": {"get": {"security": [], "summary": "Prometheus text: jobs, slots, host CPU, memory and GPUs",
      "responses": {"200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
  }
})json";
  return kDocument;
}

}  // namespace ddpx::serve
