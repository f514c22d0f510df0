-- Argo CD resource actions of a SimpleWebApp (example.com/v1):
--   suspend        spec.suspend: true, the break-glass: the operator stops
--                  writing the app's objects (offered while not suspended);
--   resume         spec.suspend: false: hand edits are reverted (offered
--                  while suspended);
--   reconcile-now  sets the simplewebapp.example.com/reconcile-requested-at
--                  annotation to the current time: one reconcile that
--                  re-applies every object, or is only acknowledged while
--                  suspended (always offered).
-- An action that does not apply is listed disabled, as in Argo CD's own
-- actions for Flux objects. Installed as
-- resource.customizations.actions.example.com_SimpleWebApp in argocd-cm
-- (config/argocd/argocd-cm-patch.yaml); tests/argocd runs them with
-- gopher-lua.
local actions = {}
local suspended = obj.spec ~= nil and obj.spec.suspend == true
actions["suspend"] = {["disabled"] = suspended}
actions["resume"] = {["disabled"] = not suspended}
actions["reconcile-now"] = {["disabled"] = false}
return actions
