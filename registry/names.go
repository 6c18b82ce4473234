package registry

// FleetNamePattern is the rule every [fleets.NAME] name follows, as a
// regular expression (quoted in errors).
const FleetNamePattern = fleetNamePattern

// ValidFleetName reports whether n is a valid fleet name
// (FleetNamePattern): what Load accepts as NAME in [fleets.NAME].
func ValidFleetName(n string) bool { return validFleetName(n) }
