import Synchronization
import Testing

/// What a test started and must stop before it counts as ended (servers, folders): each test of a suite marked
/// `.teardowns` gets a list, and what it adds is stopped in reverse order, awaited, when the test returns or throws.
/// No teardown is left running into the next test.
public final class Teardowns: Sendable {
    @TaskLocal public static var current: Teardowns?

    private let steps = Mutex<[@Sendable () async -> Void]>([])

    init() {}

    /// Adds `step` to the current test's teardown; records an issue when the test runs outside a `.teardowns` scope
    /// (it would leave `step` to no one).
    public static func add(_ step: @escaping @Sendable () async -> Void) {
        guard let current else {
            Issue.record("this test starts something it must stop: mark its suite `.teardowns`")
            return
        }
        current.steps.withLock { $0.append(step) }
    }

    func run() async {
        for step in steps.withLock({ $0 }).reversed() { await step() }
    }
}

/// The trait that gives each test of a suite its `Teardowns` and awaits them.
public struct TeardownTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard !test.isSuite else { return try await function() }
        let teardowns = Teardowns()
        do {
            try await Teardowns.$current.withValue(teardowns) { try await function() }
        } catch {
            await teardowns.run()
            throw error
        }
        await teardowns.run()
    }
}

extension Trait where Self == TeardownTrait {
    /// Every test of the suite awaits the teardown of what it started (`Teardowns.add`) before it ends.
    public static var teardowns: Self { Self() }
}
