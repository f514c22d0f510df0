-- Argo CD health of a SimpleWebApp (example.com/v1), from the status the
-- operator writes (kstatus conventions, api/v1/conditions.go):
--   Progressing  the operator has not processed this generation yet, or it is
--                rolling out, or it retries a transient failure
--                (Reconciling=True);
--   Degraded     it cannot proceed until the spec or the channels change
--                (Stalled=True: a terminal reason, RolloutFailed, RolledBack);
--   Suspended    spec.suspend is true (reason Suspended);
--   Healthy      Ready=True (reason Available).
-- Installed as resource.customizations.health.example.com_SimpleWebApp in
-- argocd-cm (config/argocd/argocd-cm-patch.yaml); tests/argocd runs it with
-- gopher-lua against objects captured from a real API server.
local hs = {}

local function condition(conditions, type)
  for _, c in ipairs(conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to process generation " .. generation
  return hs
end

local ready = condition(obj.status.conditions, "Ready")
local stalled = condition(obj.status.conditions, "Stalled")
local reconciling = condition(obj.status.conditions, "Reconciling")

-- A condition of an older generation says nothing about this one.
local function current(c)
  return c ~= nil and (c.observedGeneration == nil or generation == nil or c.observedGeneration >= generation)
end

if current(ready) and ready.reason == "Suspended" then
  hs.status = "Suspended"
  hs.message = describe(ready)
  return hs
end
if current(stalled) and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end
if current(reconciling) and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end
if current(ready) and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

hs.status = "Progressing"
if current(ready) then
  hs.message = describe(ready)
else
  hs.message = "Waiting for the operator to report the Ready condition"
end
return hs
