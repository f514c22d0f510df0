-- Break-glass: the operator stops writing this SimpleWebApp's objects.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = true
return obj
