-- A new value of the annotation asks the operator for one reconcile that
-- re-applies every object; the current time (RFC 3339, UTC) is always new.
-- Argo CD runs scripts from argocd-cm without the global os; its safe os
-- (time and date) is reached through require.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["simplewebapp.example.com/reconcile-requested-at"] = os.date("!%Y-%m-%dT%XZ")
return obj
