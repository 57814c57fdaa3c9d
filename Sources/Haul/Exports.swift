/// A program that embeds Haul imports `Haul` alone and names every type of its API: the errors, checksums, ranges and
/// transfer types the manager's functions take and return are declared in `HaulCore` (which the command line and
/// the daemon's wire types share without the engine).
@_exported import HaulCore
