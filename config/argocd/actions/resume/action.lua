-- The operator writes this SimpleWebApp's objects again, reverting hand edits.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = false
return obj
