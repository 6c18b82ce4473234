package registry

// FleetNamePattern is the rule every [fleets.NAME] name follows, as a
// regular expression (quoted in errors).
const FleetNamePattern = fleetNamePattern
